"""The configuration: every setting declared once (``settings``), read from the environment."""
