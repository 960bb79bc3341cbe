#ifndef GLUCOSE_GATEWAY_CSQLITE_SHIM_H
#define GLUCOSE_GATEWAY_CSQLITE_SHIM_H
#include <sqlite3.h>

/// SQLITE_TRANSIENT is a cast macro Swift cannot import: it tells SQLite to copy a bound value
/// before the bind call returns.
static inline sqlite3_destructor_type csqlite_transient(void) {
    return SQLITE_TRANSIENT;
}
#endif
