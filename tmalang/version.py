"""tmalang's version: its one source (pyproject reads it through hatch; caches key on it)."""

VERSION = "0.1.0"
