"""The studies of docs/protocols.md (issue 59)."""
