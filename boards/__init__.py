"""Packaged board profiles (TOML files in this folder)."""
