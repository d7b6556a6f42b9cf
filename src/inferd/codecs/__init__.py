"""Pure conversions between wire formats and core types."""
