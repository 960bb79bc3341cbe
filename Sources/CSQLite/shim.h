#ifndef GLUCOSE_GATEWAY_CSQLITE_SHIM_H
#define GLUCOSE_GATEWAY_CSQLITE_SHIM_H
#include <sqlite3.h>

/// SQLITE_TRANSIENT is a cast macro Swift cannot import: it tells SQLite to copy a bound value
/// before the bind call returns.
static inline sqlite3_destructor_type csqlite_transient(void) {
    return SQLITE_TRANSIENT;
}

/// Turns off SQLite's memory statistics, which take a global mutex on every allocation. Must run before
/// the library initializes (the first open); later it returns SQLITE_MISUSE and changes nothing.
static inline int csqlite_disable_memory_statistics(void) {
    return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}
#endif
