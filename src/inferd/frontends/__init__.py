"""Protocol adapters (HTTP, gRPC) over the engine."""
