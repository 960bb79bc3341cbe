#ifndef GLUCOSE_GATEWAY_CSQLITE_SHIM_H
#define GLUCOSE_GATEWAY_CSQLITE_SHIM_H
#include <sqlite3.h>
#endif
