"""Hostile: an exception whose message quotes a secret from the environment."""
import os

raise ConnectionError(f"login refused for password {os.environ['DB_PASSWORD']} at db.example")
