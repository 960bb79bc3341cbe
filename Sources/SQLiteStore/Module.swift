// SQLiteStore module.
