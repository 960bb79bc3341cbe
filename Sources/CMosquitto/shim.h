#ifndef GLUCOSE_GATEWAY_CMOSQUITTO_SHIM_H
#define GLUCOSE_GATEWAY_CMOSQUITTO_SHIM_H
#include <mosquitto.h>
#include <dlfcn.h>
#include <stdbool.h>
#include <stddef.h>

// libmosquitto is loaded at run time, and only by a gateway whose config has an [mqtt] section: a gateway
// that never publishes to a broker never maps it (nor the TLS libraries behind it). Only the headers
// (libmosquitto-dev) are needed to build; the library itself comes from libmosquitto1.
//
// The function table lives in a static inline accessor. Only SyncEngine's MQTTClient.swift includes this
// header, so there is exactly one table in the process.

struct gg_mosq_api {
    int state; // 0 not loaded, 1 loaded, -1 failed
    int (*lib_init)(void);
    struct mosquitto *(*new_client)(const char *, bool, void *);
    void (*destroy)(struct mosquitto *);
    int (*threaded_set)(struct mosquitto *, bool);
    int (*int_option)(struct mosquitto *, enum mosq_opt_t, int);
    int (*username_pw_set)(struct mosquitto *, const char *, const char *);
    int (*will_set)(struct mosquitto *, const char *, int, const void *, int, bool);
    int (*tls_set)(struct mosquitto *, const char *, const char *, const char *, const char *, int (*)(char *, int, int, void *));
    int (*connect_async)(struct mosquitto *, const char *, int, int);
    int (*reconnect_async)(struct mosquitto *);
    int (*disconnect)(struct mosquitto *);
    int (*publish)(struct mosquitto *, int *, const char *, int, const void *, int, bool);
    int (*loop)(struct mosquitto *, int, int);
    void (*connect_callback_set)(struct mosquitto *, void (*)(struct mosquitto *, void *, int));
    void (*disconnect_callback_set)(struct mosquitto *, void (*)(struct mosquitto *, void *, int));
    void (*publish_callback_set)(struct mosquitto *, void (*)(struct mosquitto *, void *, int));
    const char *(*strerror)(int);
    const char *(*connack_string)(int);
    int (*reinitialise)(struct mosquitto *, const char *, bool, void *);
    int (*socket)(struct mosquitto *);
    void (*log_callback_set)(struct mosquitto *, void (*)(struct mosquitto *, void *, int, const char *));
    void *(*ssl_get)(struct mosquitto *);
    bool (*want_write)(struct mosquitto *);
    // From the libssl libmosquitto already loaded; NULL when it is not there (a build without TLS).
    long (*ssl_get_verify_result)(const void *);
};

static inline struct gg_mosq_api *gg_mosq(void) {
    static struct gg_mosq_api api;
    return &api;
}

/// Loads libmosquitto and runs mosquitto_lib_init once. Returns 1 when usable. Not thread-safe: call it
/// from one place that runs once (a Swift static let).
static inline int gg_mosq_load(void) {
    struct gg_mosq_api *a = gg_mosq();
    if (a->state != 0) return a->state == 1;
    void *lib = dlopen("libmosquitto.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) { a->state = -1; return 0; }
    *(void **)&a->lib_init = dlsym(lib, "mosquitto_lib_init");
    *(void **)&a->new_client = dlsym(lib, "mosquitto_new");
    *(void **)&a->destroy = dlsym(lib, "mosquitto_destroy");
    *(void **)&a->threaded_set = dlsym(lib, "mosquitto_threaded_set");
    *(void **)&a->int_option = dlsym(lib, "mosquitto_int_option");
    *(void **)&a->username_pw_set = dlsym(lib, "mosquitto_username_pw_set");
    *(void **)&a->will_set = dlsym(lib, "mosquitto_will_set");
    *(void **)&a->tls_set = dlsym(lib, "mosquitto_tls_set");
    *(void **)&a->connect_async = dlsym(lib, "mosquitto_connect_async");
    *(void **)&a->reconnect_async = dlsym(lib, "mosquitto_reconnect_async");
    *(void **)&a->disconnect = dlsym(lib, "mosquitto_disconnect");
    *(void **)&a->publish = dlsym(lib, "mosquitto_publish");
    *(void **)&a->loop = dlsym(lib, "mosquitto_loop");
    *(void **)&a->connect_callback_set = dlsym(lib, "mosquitto_connect_callback_set");
    *(void **)&a->disconnect_callback_set = dlsym(lib, "mosquitto_disconnect_callback_set");
    *(void **)&a->publish_callback_set = dlsym(lib, "mosquitto_publish_callback_set");
    *(void **)&a->strerror = dlsym(lib, "mosquitto_strerror");
    *(void **)&a->connack_string = dlsym(lib, "mosquitto_connack_string");
    *(void **)&a->reinitialise = dlsym(lib, "mosquitto_reinitialise");
    *(void **)&a->socket = dlsym(lib, "mosquitto_socket");
    *(void **)&a->log_callback_set = dlsym(lib, "mosquitto_log_callback_set");
    *(void **)&a->ssl_get = dlsym(lib, "mosquitto_ssl_get");
    *(void **)&a->want_write = dlsym(lib, "mosquitto_want_write");
    // RTLD_NOLOAD: only the libssl that libmosquitto itself links, never another one.
    void *ssl = dlopen("libssl.so.3", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    if (ssl) *(void **)&a->ssl_get_verify_result = dlsym(ssl, "SSL_get_verify_result");
    if (!a->lib_init || !a->new_client || !a->destroy || !a->threaded_set || !a->int_option || !a->username_pw_set ||
        !a->will_set || !a->tls_set || !a->connect_async || !a->reconnect_async || !a->disconnect || !a->publish ||
        !a->loop || !a->connect_callback_set || !a->disconnect_callback_set || !a->publish_callback_set ||
        !a->strerror || !a->connack_string || !a->reinitialise || !a->socket || !a->log_callback_set || !a->want_write ||
        a->lib_init() != MOSQ_ERR_SUCCESS) {
        a->state = -1;
        return 0;
    }
    a->state = 1;
    return 1;
}

typedef void (*gg_mosq_event_fn)(struct mosquitto *, void *, int);
typedef void (*gg_mosq_log_fn)(struct mosquitto *, void *, int, const char *);

// Callers use these only after gg_mosq_load() returned 1.
static inline struct mosquitto *gg_mosq_new(const char *id, void *obj) { return gg_mosq()->new_client(id, true, obj); }
static inline void gg_mosq_destroy(struct mosquitto *m) { gg_mosq()->destroy(m); }
static inline int gg_mosq_threaded_set(struct mosquitto *m) { return gg_mosq()->threaded_set(m, true); }
static inline int gg_mosq_protocol_v311(struct mosquitto *m) { return gg_mosq()->int_option(m, MOSQ_OPT_PROTOCOL_VERSION, MQTT_PROTOCOL_V311); }
static inline int gg_mosq_use_os_certs(struct mosquitto *m) { return gg_mosq()->int_option(m, MOSQ_OPT_TLS_USE_OS_CERTS, 1); }
static inline int gg_mosq_username_pw_set(struct mosquitto *m, const char *u, const char *p) { return gg_mosq()->username_pw_set(m, u, p); }
static inline int gg_mosq_will_set(struct mosquitto *m, const char *topic, int len, const void *payload, int qos, bool retain) {
    return gg_mosq()->will_set(m, topic, len, payload, qos, retain);
}
static inline int gg_mosq_tls_set(struct mosquitto *m, const char *cafile, const char *capath) {
    return gg_mosq()->tls_set(m, cafile, capath, NULL, NULL, NULL);
}
static inline int gg_mosq_connect_async(struct mosquitto *m, const char *host, int port, int keepalive) {
    return gg_mosq()->connect_async(m, host, port, keepalive);
}
static inline int gg_mosq_reconnect_async(struct mosquitto *m) { return gg_mosq()->reconnect_async(m); }
static inline int gg_mosq_disconnect(struct mosquitto *m) { return gg_mosq()->disconnect(m); }
static inline int gg_mosq_publish(struct mosquitto *m, int *mid, const char *topic, int len, const void *payload, int qos, bool retain) {
    return gg_mosq()->publish(m, mid, topic, len, payload, qos, retain);
}
static inline int gg_mosq_loop(struct mosquitto *m, int timeout_ms) { return gg_mosq()->loop(m, timeout_ms, 1); }
static inline void gg_mosq_callbacks_set(struct mosquitto *m, gg_mosq_event_fn on_connect, gg_mosq_event_fn on_disconnect, gg_mosq_event_fn on_publish) {
    gg_mosq()->connect_callback_set(m, on_connect);
    gg_mosq()->disconnect_callback_set(m, on_disconnect);
    gg_mosq()->publish_callback_set(m, on_publish);
}
/// Clears the handle as mosquitto_new leaves it: every queued message and option is gone.
static inline int gg_mosq_reinitialise(struct mosquitto *m, const char *id, void *obj) { return gg_mosq()->reinitialise(m, id, true, obj); }
static inline int gg_mosq_socket(struct mosquitto *m) { return gg_mosq()->socket(m); }
static inline bool gg_mosq_want_write(struct mosquitto *m) { return gg_mosq()->want_write(m); }
static inline void gg_mosq_log_callback_set(struct mosquitto *m, gg_mosq_log_fn fn) { gg_mosq()->log_callback_set(m, fn); }
/// The X.509 verification result of the TLS session being set up (X509_V_OK is 0), or -1 when unknown.
/// Valid inside the log callback of a failed handshake, while libmosquitto still holds the session.
static inline long gg_mosq_verify_result(struct mosquitto *m) {
    struct gg_mosq_api *a = gg_mosq();
    if (!a->ssl_get || !a->ssl_get_verify_result) return -1;
    void *ssl = a->ssl_get(m);
    return ssl ? a->ssl_get_verify_result(ssl) : -1;
}
static inline const char *gg_mosq_strerror(int rc) { return gg_mosq()->strerror(rc); }
static inline const char *gg_mosq_connack_string(int rc) { return gg_mosq()->connack_string(rc); }
#endif
