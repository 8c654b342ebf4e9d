"""hookbridge: turns polling-only document-extraction vendor APIs into signed webhook callbacks."""

__version__ = "0.1.0"
