"""The engine's lifecycle: the host-owned driver process, its record pipe, resident engines."""
