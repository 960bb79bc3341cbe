#ifndef GLUCOSE_GATEWAY_CCURL_SHIM_H
#define GLUCOSE_GATEWAY_CCURL_SHIM_H
#include <curl/curl.h>

// curl_easy_setopt and curl_easy_getinfo are variadic, which Swift cannot call: one typed wrapper each.
typedef size_t (*gg_curl_data_fn)(char *, size_t, size_t, void *);
typedef int (*gg_curl_xferinfo_fn)(void *, curl_off_t, curl_off_t, curl_off_t, curl_off_t);

static inline CURLcode gg_curl_setopt_long(CURL *h, CURLoption o, long v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode gg_curl_setopt_string(CURL *h, CURLoption o, const char *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode gg_curl_setopt_pointer(CURL *h, CURLoption o, void *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode gg_curl_setopt_slist(CURL *h, CURLoption o, struct curl_slist *v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode gg_curl_setopt_data_fn(CURL *h, CURLoption o, gg_curl_data_fn f) { return curl_easy_setopt(h, o, f); }
static inline CURLcode gg_curl_setopt_xferinfo_fn(CURL *h, gg_curl_xferinfo_fn f) { return curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, f); }
static inline CURLcode gg_curl_setopt_off(CURL *h, CURLoption o, curl_off_t v) { return curl_easy_setopt(h, o, v); }
static inline CURLcode gg_curl_getinfo_long(CURL *h, CURLINFO i, long *v) { return curl_easy_getinfo(h, i, v); }
static inline CURLcode gg_curl_getinfo_double(CURL *h, CURLINFO i, double *v) { return curl_easy_getinfo(h, i, v); }
#endif
