"""Renderers: human text, JSON and the other output formats, all fed from the same data."""
