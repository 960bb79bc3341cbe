#ifndef GLUCOSE_GATEWAY_CCURL_SHIM_H
#define GLUCOSE_GATEWAY_CCURL_SHIM_H
#include <curl/curl.h>
#include <dlfcn.h>
#include <stddef.h>

// libcurl is loaded at run time, on the first upload, not linked: linking it maps libcurl and about thirty
// libraries behind it (TLS, Kerberos, LDAP, ...), about 6.6 MB of resident memory in every gateway process,
// also in those that never upload (a download, `status`, a gateway with no destination configured).
//
// The function table lives in a static inline accessor. Only SyncEngine's CurlHTTPClient.swift includes this
// header, so there is exactly one table in the process.

struct gg_curl_api {
    int state; // 0 not loaded, 1 loaded, -1 failed
    CURLcode (*global_init)(long);
    CURL *(*easy_init)(void);
    void (*easy_cleanup)(CURL *);
    CURLcode (*easy_perform)(CURL *);
    void (*easy_reset)(CURL *);
    const char *(*easy_strerror)(CURLcode);
    struct curl_slist *(*slist_append)(struct curl_slist *, const char *);
    void (*slist_free_all)(struct curl_slist *);
    CURLcode (*easy_setopt)(CURL *, CURLoption, ...);
    CURLcode (*easy_getinfo)(CURL *, CURLINFO, ...);
};

static inline struct gg_curl_api *gg_curl(void) {
    static struct gg_curl_api api;
    return &api;
}

/// Loads libcurl and runs curl_global_init once. Returns 1 when usable. Not thread-safe: call it from one
/// place that runs once (a Swift static let).
static inline int gg_curl_load(void) {
    struct gg_curl_api *a = gg_curl();
    if (a->state != 0) return a->state == 1;
    void *lib = dlopen("libcurl.so.4", RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen("libcurl-gnutls.so.4", RTLD_NOW | RTLD_LOCAL);
    if (!lib) { a->state = -1; return 0; }
    *(void **)&a->global_init = dlsym(lib, "curl_global_init");
    *(void **)&a->easy_init = dlsym(lib, "curl_easy_init");
    *(void **)&a->easy_cleanup = dlsym(lib, "curl_easy_cleanup");
    *(void **)&a->easy_perform = dlsym(lib, "curl_easy_perform");
    *(void **)&a->easy_reset = dlsym(lib, "curl_easy_reset");
    *(void **)&a->easy_strerror = dlsym(lib, "curl_easy_strerror");
    *(void **)&a->slist_append = dlsym(lib, "curl_slist_append");
    *(void **)&a->slist_free_all = dlsym(lib, "curl_slist_free_all");
    *(void **)&a->easy_setopt = dlsym(lib, "curl_easy_setopt");
    *(void **)&a->easy_getinfo = dlsym(lib, "curl_easy_getinfo");
    if (!a->global_init || !a->easy_init || !a->easy_cleanup || !a->easy_perform || !a->easy_reset ||
        !a->easy_strerror || !a->slist_append || !a->slist_free_all || !a->easy_setopt || !a->easy_getinfo ||
        a->global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        a->state = -1;
        return 0;
    }
    a->state = 1;
    return 1;
}

// Callers use these only after gg_curl_load() returned 1.
static inline CURL *gg_curl_easy_init(void) { return gg_curl()->easy_init(); }
static inline void gg_curl_easy_cleanup(CURL *h) { gg_curl()->easy_cleanup(h); }
static inline CURLcode gg_curl_easy_perform(CURL *h) { return gg_curl()->easy_perform(h); }
static inline void gg_curl_easy_reset(CURL *h) { gg_curl()->easy_reset(h); }
static inline const char *gg_curl_easy_strerror(CURLcode c) { return gg_curl()->easy_strerror(c); }
static inline struct curl_slist *gg_curl_slist_append(struct curl_slist *l, const char *s) { return gg_curl()->slist_append(l, s); }
static inline void gg_curl_slist_free_all(struct curl_slist *l) { gg_curl()->slist_free_all(l); }

// curl_easy_setopt and curl_easy_getinfo are variadic, which Swift cannot call: one typed wrapper each.
typedef size_t (*gg_curl_data_fn)(char *, size_t, size_t, void *);
typedef int (*gg_curl_xferinfo_fn)(void *, curl_off_t, curl_off_t, curl_off_t, curl_off_t);

static inline CURLcode gg_curl_setopt_long(CURL *h, CURLoption o, long v) { return gg_curl()->easy_setopt(h, o, v); }
static inline CURLcode gg_curl_setopt_string(CURL *h, CURLoption o, const char *v) { return gg_curl()->easy_setopt(h, o, v); }
static inline CURLcode gg_curl_setopt_pointer(CURL *h, CURLoption o, void *v) { return gg_curl()->easy_setopt(h, o, v); }
static inline CURLcode gg_curl_setopt_slist(CURL *h, CURLoption o, struct curl_slist *v) { return gg_curl()->easy_setopt(h, o, v); }
static inline CURLcode gg_curl_setopt_data_fn(CURL *h, CURLoption o, gg_curl_data_fn f) { return gg_curl()->easy_setopt(h, o, f); }
static inline CURLcode gg_curl_setopt_xferinfo_fn(CURL *h, gg_curl_xferinfo_fn f) { return gg_curl()->easy_setopt(h, CURLOPT_XFERINFOFUNCTION, f); }
static inline CURLcode gg_curl_setopt_off(CURL *h, CURLoption o, curl_off_t v) { return gg_curl()->easy_setopt(h, o, v); }
static inline CURLcode gg_curl_getinfo_long(CURL *h, CURLINFO i, long *v) { return gg_curl()->easy_getinfo(h, i, v); }
static inline CURLcode gg_curl_getinfo_double(CURL *h, CURLINFO i, double *v) { return gg_curl()->easy_getinfo(h, i, v); }
#endif
