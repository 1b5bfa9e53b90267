"""The store: tables, the SQLite engine and its migrations, and the named queries."""
