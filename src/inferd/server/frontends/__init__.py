"""Transport between front-end processes and the engine process (``inferd serve --frontends K``).

Linux only (eventfd, tmpfs ``/dev/shm``); :func:`available` says whether this machine has them.

* :mod:`.ring` — a single-producer, single-consumer ring of fixed-size descriptors in shared
  memory;
* :mod:`.doorbell` — an eventfd rung when a ring goes from empty to non-empty;
* :mod:`.arena` — fixed-size shared-memory slots for tensor bytes, freed per holder when a
  front end dies;
* :mod:`.channel` — one front end's request and reply rings with their doorbells, as an async
  ``send``/``receive`` pair.

The layout and the memory-ordering argument are in each module's docstring and in
docs/scaling.md.
"""

from .arena import Arena, ArenaError, Block
from .channel import (
    Channel,
    ChannelClosedError,
    ChannelSpec,
    ChannelStatistics,
    create_channel,
)
from .doorbell import Doorbell
from .ring import DescriptorTooLargeError, Put, Ring, RingError
from .shared import available

__all__ = [
    "Arena",
    "ArenaError",
    "Block",
    "Channel",
    "ChannelClosedError",
    "ChannelSpec",
    "ChannelStatistics",
    "DescriptorTooLargeError",
    "Doorbell",
    "Put",
    "Ring",
    "RingError",
    "available",
    "create_channel",
]
