import CCurl
import Dispatch
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// HTTP over libcurl. Chosen over FoundationNetworking's URLSession by measurement (see docs/performance.md, "HTTP clients"):
/// a URLSession alone costs the process about 18 MB more peak memory than libcurl does.
///
/// TLS verification is always on (peer and host name); `caFile` replaces the system store for a
/// private CA, and no setting turns verification off. Each request runs `curl_easy_perform` on a
/// dispatch thread; easy handles are reused so the connection to a server stays open between batches.
///
/// A plain `http://` URL with no proxy in the environment (a server on the gateway itself or on the
/// local network) goes over ``SocketHTTPClient`` instead, which needs no library: such a process never
/// maps libcurl and its TLS libraries.
public final class CurlHTTPClient: HTTPClient {

    private let pool = Mutex<[CurlHandle]>([])
    private let plain = SocketHTTPClient()
    /// Read once: the environment of a running gateway does not change.
    private let proxyConfigured = plainHTTPProxyConfigured()

    public init() {}

    deinit {
        let handles = pool.withLock { list -> [CurlHandle] in
            let copy = list
            list.removeAll()
            return copy
        }
        for h in handles { gg_curl_easy_cleanup(h.pointer) }
    }

    /// Loads libcurl and runs `curl_global_init` (not thread-safe) exactly once, on the first request: a
    /// gateway process that never uploads never maps libcurl and the TLS libraries behind it.
    private static let libraryLoaded: Bool = gg_curl_load() == 1

    public func send(_ request: HTTPRequest) async throws(HTTPError) -> HTTPResponse {
        let cancel = CancelFlag()
        if !proxyConfigured, let target = request.location?.plainHTTPTarget {
            let plain = self.plain
            let result: Result<HTTPResponse, HTTPError> = await withTaskCancellationHandler {
                await withCheckedContinuation { (continuation: CheckedContinuation<Result<HTTPResponse, HTTPError>, Never>) in
                    DispatchQueue.global().async {
                        continuation.resume(returning: plain.perform(request, to: target, cancelled: { cancel.isSet }))
                    }
                }
            } onCancel: {
                cancel.set()
            }
            return try result.get()
        }
        let result: Result<HTTPResponse, HTTPError> = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Result<HTTPResponse, HTTPError>, Never>) in
                let handle = self.take()
                DispatchQueue.global().async {
                    let outcome = CurlHTTPClient.perform(request, handle: handle, cancel: cancel)
                    self.give(handle, keep: outcome.reusable)
                    continuation.resume(returning: outcome.result)
                }
            }
        } onCancel: {
            cancel.set()
        }
        return try result.get()
    }

    private func take() -> CurlHandle? {
        if let h = pool.withLock({ $0.popLast() }) { return h }
        guard CurlHTTPClient.libraryLoaded, let p = gg_curl_easy_init() else { return nil }
        return CurlHandle(pointer: p)
    }

    private func give(_ handle: CurlHandle?, keep: Bool) {
        guard let handle else { return }
        if keep {
            let extra = pool.withLock { list -> CurlHandle? in
                if list.count >= 4 { return handle }
                list.append(handle)
                return nil
            }
            if let extra { gg_curl_easy_cleanup(extra.pointer) }
        } else {
            gg_curl_easy_cleanup(handle.pointer)
        }
    }

    private static func perform(_ request: HTTPRequest, handle: CurlHandle?, cancel: CancelFlag) -> (result: Result<HTTPResponse, HTTPError>, reusable: Bool) {
        guard let h = handle?.pointer else { return (.failure(.other(CurlHTTPClient.libraryLoaded ? "cannot create an HTTP handle" : "libcurl is not installed (Debian package libcurl4)")), false) }
        gg_curl_easy_reset(h)
        let sink = ResponseSink(cancel: cancel, limit: max(0, min(request.maxResponseBytes, HTTPRequest.maximumResponseBytes)))
        let sinkPointer = Unmanaged.passUnretained(sink).toOpaque()
        var headerList: UnsafeMutablePointer<curl_slist>?
        defer { if let list = headerList { gg_curl_slist_free_all(list) } }
        var headers = request.headers
        if !request.body.isEmpty || request.method == "POST" || request.method == "PUT" {
            headers.append(("Expect", ""))
        }
        for (name, value) in headers {
            let line = value.isEmpty ? "\(name):" : "\(name): \(value)"
            headerList = gg_curl_slist_append(headerList, line)
        }

        var code: CURLcode = CURLE_OK
        func set(_ option: CURLoption, _ value: Int) { if code == CURLE_OK { code = gg_curl_setopt_long(h, option, value) } }
        func set(_ option: CURLoption, _ value: String) { if code == CURLE_OK { code = gg_curl_setopt_string(h, option, value) } }

        set(CURLOPT_URL, request.url)
        set(CURLOPT_NOSIGNAL, 1)
        set(CURLOPT_PROTOCOLS_STR, "http,https")
        set(CURLOPT_FOLLOWLOCATION, 0)
        set(CURLOPT_SSL_VERIFYPEER, 1)
        set(CURLOPT_SSL_VERIFYHOST, 2)
        if let ca = request.caFile { set(CURLOPT_CAINFO, ca) }
        set(CURLOPT_CONNECTTIMEOUT_MS, max(1, request.connectTimeoutMs))
        set(CURLOPT_TIMEOUT_MS, max(1, request.timeoutMs))
        set(CURLOPT_NOPROGRESS, 0)
        if code == CURLE_OK { code = gg_curl_setopt_xferinfo_fn(h, curlProgress) }
        if code == CURLE_OK { code = gg_curl_setopt_pointer(h, CURLOPT_XFERINFODATA, sinkPointer) }
        if code == CURLE_OK { code = gg_curl_setopt_data_fn(h, CURLOPT_WRITEFUNCTION, curlWriteBody) }
        if code == CURLE_OK { code = gg_curl_setopt_pointer(h, CURLOPT_WRITEDATA, sinkPointer) }
        if code == CURLE_OK { code = gg_curl_setopt_data_fn(h, CURLOPT_HEADERFUNCTION, curlWriteHeader) }
        if code == CURLE_OK { code = gg_curl_setopt_pointer(h, CURLOPT_HEADERDATA, sinkPointer) }
        if code == CURLE_OK, let list = headerList { code = gg_curl_setopt_slist(h, CURLOPT_HTTPHEADER, list) }
        switch request.method {
        case "GET": set(CURLOPT_HTTPGET, 1)
        case "POST": set(CURLOPT_POST, 1)
        default: set(CURLOPT_CUSTOMREQUEST, request.method)
        }
        guard code == CURLE_OK else {
            return (.failure(.other("HTTP setup failed: \(String(cString: gg_curl_easy_strerror(code)))")), false)
        }

        let performed: CURLcode = request.body.withUnsafeBufferPointer { buffer in
            if request.method != "GET" {
                _ = gg_curl_setopt_off(h, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(buffer.count))
                _ = gg_curl_setopt_pointer(h, CURLOPT_POSTFIELDS, UnsafeMutableRawPointer(mutating: buffer.baseAddress ?? UnsafePointer(bitPattern: 1)))
            }
            return gg_curl_easy_perform(h)
        }
        _ = sink  // keeps the sink alive across the perform

        if performed == CURLE_OK {
            var status = 0
            _ = gg_curl_getinfo_long(h, CURLINFO_RESPONSE_CODE, &status)
            return (.success(HTTPResponse(status: status, headers: sink.headers, body: sink.body)), true)
        }
        if sink.headerOverflow, !cancel.isSet { return (.failure(.headersTooLong), false) }
        if sink.overflow, !cancel.isSet {
            var status = 0
            _ = gg_curl_getinfo_long(h, CURLINFO_RESPONSE_CODE, &status)
            return (.failure(.tooLarge(limit: sink.limit, status: status)), false)
        }
        return (.failure(classify(performed, handle: h, cancelled: cancel.isSet)), false)
    }

    private static func classify(_ code: CURLcode, handle h: UnsafeMutableRawPointer, cancelled: Bool) -> HTTPError {
        if cancelled { return .cancelled }
        var osErrno = 0
        _ = gg_curl_getinfo_long(h, CURLINFO_OS_ERRNO, &osErrno)
        switch code {
        case CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY:
            return .resolveFailed
        case CURLE_COULDNT_CONNECT:
            switch Int32(osErrno) {
            case ECONNREFUSED: return .connectionRefused
            case ENETUNREACH, EHOSTUNREACH, ENETDOWN, EHOSTDOWN: return .unreachable
            case ETIMEDOUT: return .timedOut(connected: false)
            default: return .unreachable
            }
        case CURLE_OPERATION_TIMEDOUT:
            var connectTime = 0.0
            _ = gg_curl_getinfo_double(h, CURLINFO_CONNECT_TIME, &connectTime)
            return .timedOut(connected: connectTime > 0)
        case CURLE_GOT_NOTHING, CURLE_SEND_ERROR, CURLE_RECV_ERROR, CURLE_PARTIAL_FILE:
            return .connectionLost
        case CURLE_SSL_CONNECT_ERROR, CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CERTPROBLEM, CURLE_SSL_CIPHER,
             CURLE_SSL_CACERT_BADFILE, CURLE_SSL_ENGINE_NOTFOUND, CURLE_SSL_PINNEDPUBKEYNOTMATCH, CURLE_SSL_INVALIDCERTSTATUS:
            return .tls(String(cString: gg_curl_easy_strerror(code)))
        case CURLE_ABORTED_BY_CALLBACK:
            return .cancelled
        default:
            return .other(String(cString: gg_curl_easy_strerror(code)))
        }
    }
}

/// An easy handle moving between the pool and one transfer at a time. Safe to send: the pool hands
/// it to exactly one transfer, which gives it back when done.
private struct CurlHandle: @unchecked Sendable {
    let pointer: UnsafeMutableRawPointer
}

private final class CancelFlag: Sendable {
    private let flag = Atomic<Bool>(false)
    func set() { flag.store(true, ordering: .relaxed) }
    var isSet: Bool { flag.load(ordering: .relaxed) }
}

/// Collects one transfer's answer. Touched only by the thread running that transfer's perform.
private final class ResponseSink {
    var body: [UInt8] = []
    var headers: [String: String] = [:]
    /// Bytes of header lines taken; curl bounds each line, this bounds them all.
    var headerBytes = 0
    /// The header lines (interim answers' included) passed 64 KiB.
    var headerOverflow = false
    var overflow = false
    let cancel: CancelFlag
    /// The request's answer limit: a body that would grow past it ends the transfer.
    let limit: Int
    init(cancel: CancelFlag, limit: Int) {
        self.cancel = cancel
        self.limit = limit
    }
}

private let curlWriteBody: gg_curl_data_fn = { data, size, count, user in
    guard let user, let data else { return 0 }
    let sink = Unmanaged<ResponseSink>.fromOpaque(user).takeUnretainedValue()
    let n = size * count
    if sink.body.count + n > sink.limit {
        sink.overflow = true
        sink.body = []  // the memory goes back now, not when the transfer's error is handled
        return 0
    }
    data.withMemoryRebound(to: UInt8.self, capacity: n) { sink.body.append(contentsOf: UnsafeBufferPointer(start: $0, count: n)) }
    return n
}

private let curlWriteHeader: gg_curl_data_fn = { data, size, count, user in
    guard let user, let data else { return 0 }
    let sink = Unmanaged<ResponseSink>.fromOpaque(user).takeUnretainedValue()
    let n = size * count
    sink.headerBytes += n
    if sink.headerBytes > 64 << 10 {
        sink.headerOverflow = true
        return 0
    }
    let line = data.withMemoryRebound(to: UInt8.self, capacity: n) { String(decoding: UnsafeBufferPointer(start: $0, count: n), as: UTF8.self) }
    if line.hasPrefix("HTTP/") {
        sink.headers = [:]  // a new status line (after 100 Continue): start over
    } else if let colon = line.firstIndex(of: ":") {
        let name = line[..<colon].lowercased()
        let value = line[line.index(after: colon)...].trimmingCharacters(in: " \t\r\n")
        sink.headers[name] = value
    }
    return n
}

private let curlProgress: gg_curl_xferinfo_fn = { user, _, _, _, _ in
    guard let user else { return 0 }
    let sink = Unmanaged<ResponseSink>.fromOpaque(user).takeUnretainedValue()
    return sink.cancel.isSet ? 1 : 0
}

extension Substring {
    fileprivate func trimmingCharacters(in set: String) -> String {
        var s = self
        while let f = s.first, set.contains(f) { s.removeFirst() }
        while let l = s.last, set.contains(l) { s.removeLast() }
        return String(s)
    }
}
