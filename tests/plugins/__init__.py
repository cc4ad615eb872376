"""Test plugins registered the way third-party packages register (entry points)."""
