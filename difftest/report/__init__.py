"""Rendering of results: terminal tables, JSON, markdown, JUnit XML and CSV."""
