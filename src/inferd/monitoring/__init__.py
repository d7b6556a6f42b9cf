"""What watches the served traffic without being in its way: payload logging, request tracing
and data monitoring. Each part is built by the composition root from its settings."""
