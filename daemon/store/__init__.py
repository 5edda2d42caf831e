"""The runs database: SQLModel tables, the engine (SQLite, WAL), keyword-only queries."""
