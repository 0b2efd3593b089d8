//! Helpers shared by the limit algorithms (floor/ceiling, slow start, app-limited guard).
