"""Drift monitoring's settings and the snapshots it publishes.

The settings are parsed once at the edge (``inferd serve`` flags) and passed to the monitor;
the snapshots are what the metrics collector and the HTTP report read, at scrape or request
time, without touching the monitor's worker thread.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from inferd.errors import InvalidArgumentError

__all__ = ["DriftSettings", "FeatureDrift", "MonitorStatistics", "VersionDrift"]


@dataclass(frozen=True, slots=True)
class DriftSettings:
    """How the server watches live data against a version's reference profile."""

    window_rows: int = 1000  # the sliding window: the last N rows (a request of k rows adds k)
    evaluate_every_rows: int = 500  # the tests run again after this many new rows
    alpha: float = 0.001  # family-wise p-value threshold, Bonferroni-split over the tests
    psi_threshold: float = 0.2  # PSI above this is drift (the field's convention)
    psi_clear: float = 0.1  # an alert clears only once PSI is back under this
    raise_after: int = 2  # consecutive drifting evaluations before a feature's alert is raised
    clear_after: int = 4  # consecutive calm evaluations before it clears
    queue_size: int = 4096  # answered requests waiting for the worker; beyond it, dropped
    multivariate_rows: int = 200  # the window of a multivariate test (embeddings, images)
    permutations: int = 500  # permutations of the multivariate (MMD) test
    mmd_alpha: float = 0.005  # its own level: a permutation p-value is at least 1/(B+1)

    def __post_init__(self) -> None:
        if self.window_rows < 50:
            raise InvalidArgumentError("--drift-window-rows must be >= 50")
        if not 1 <= self.evaluate_every_rows <= self.window_rows:
            raise InvalidArgumentError(
                "--drift-evaluate-every-rows must be between 1 and --drift-window-rows"
            )
        if not 0.0 < self.alpha < 1.0:
            raise InvalidArgumentError("--drift-alpha must be between 0 and 1 (exclusive)")
        if not 0.0 < self.psi_clear <= self.psi_threshold:
            raise InvalidArgumentError(
                f"--drift-psi-threshold must be > 0 and at least the clear level ({self.psi_clear})"
            )
        if self.raise_after < 1 or self.clear_after < 1:
            raise InvalidArgumentError("--drift-raise-after and --drift-clear-after must be >= 1")
        if self.queue_size < 1:
            raise InvalidArgumentError("--drift-queue-size must be >= 1")
        if self.multivariate_rows < 20:
            raise InvalidArgumentError("the multivariate window must hold at least 20 rows")
        if self.permutations < 19:
            raise InvalidArgumentError("the multivariate test needs at least 19 permutations")
        if not 1.0 / (self.permutations + 1) <= self.mmd_alpha < 1.0:
            raise InvalidArgumentError(
                f"the multivariate test's level must be at least 1/(permutations+1) = "
                f"{1.0 / (self.permutations + 1):.4f}: {self.permutations} permutations cannot "
                "give a smaller p-value"
            )


@dataclass(frozen=True, slots=True)
class FeatureDrift:
    """One monitored feature (a column of a tabular tensor, or a whole embedding/image
    tensor for the multivariate test) of one version, as of the last evaluation.

    A statistic that does not apply to the feature's kind, or that was not computed yet
    (the window is not full), is ``None``. The data-quality counts are since the version was
    first observed."""

    feature: str
    tensor: str
    role: str  # "input" or "output" (prediction drift)
    kind: str  # "numeric", "categorical" or "multivariate"
    psi: float | None = None
    ks_statistic: float | None = None
    ks_pvalue: float | None = None
    wasserstein: float | None = None
    chi2_pvalue: float | None = None
    js_distance: float | None = None
    mmd: float | None = None
    mmd_pvalue: float | None = None
    drifting: bool = False  # this evaluation crossed a threshold
    alert: bool = False  # the alert, after hysteresis
    nan: int = 0
    out_of_range: int = 0  # numeric: outside the reference's [min, max]
    unseen: int = 0  # categorical: a category the reference never had


@dataclass(frozen=True, slots=True)
class VersionDrift:
    """Everything the monitor knows about one model version."""

    model: str
    version: int
    profile_rows: int  # rows the reference profile was built from
    rows: int = 0  # rows observed since the version was first seen
    requests: int = 0
    window_rows: int = 0  # rows in the sliding window now
    evaluations: int = 0
    tests: int = 0  # p-value tests per evaluation (the Bonferroni divisor)
    missing: dict[str, int] = field(default_factory=dict)  # optional input -> requests without
    features: tuple[FeatureDrift, ...] = ()

    @property
    def alerts(self) -> int:
        return sum(f.alert for f in self.features)


@dataclass(frozen=True, slots=True)
class MonitorStatistics:
    """The monitor as a whole: its queue and every version it watches."""

    queued: int
    dropped: int  # answered requests not observed because the queue was full
    failures: int  # requests the worker could not process (logged)
    versions: tuple[VersionDrift, ...] = ()
