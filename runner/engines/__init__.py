"""Isolation mechanisms behind one engine interface, one module per mechanism."""
