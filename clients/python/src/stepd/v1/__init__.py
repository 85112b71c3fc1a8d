"""Generated code of the stepd.v1 API (scripts/gen-python). Do not edit."""
