import Support
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Plain HTTP/1.1 (`http://`, no proxy) over a socket of its own, so that an upload to a server on the
/// gateway itself or on the local network never maps libcurl and the TLS libraries behind it (about 8 MB
/// of resident memory and 5 ms of CPU per process, see docs/performance.md). `https://` and anything this does not
/// parse stays with libcurl (``CurlHTTPClient`` decides).
///
/// What it speaks: one request at a time per connection; `Content-Length`, `chunked` and
/// read-until-close answers; interim 1xx answers skipped; keep-alive with one idle connection kept per
/// host and port. A kept connection is looked at before it is used: one the server has closed (or sent
/// anything on) while idle is dropped and a fresh one made. A request goes out again on a fresh
/// connection only when writing it to a kept connection failed, so the server cannot have had all of it;
/// once all of it is written, a connection closed without an answer is ``HTTPError/connectionLost``,
/// which the caller treats as an ambiguous outcome, never a silent re-send. Failures map to the same
/// ``HTTPError`` cases libcurl's do.
struct PlainHTTPTarget: Equatable {
    var host: String
    var port: UInt16
    /// Path and query, at least "/".
    var target: String
    /// The `Host` header: the host as written, with the port when one was written.
    var authority: String

    /// Nil for anything but a plain `http://host[:port][/path]` URL with a host name or IPv4 address
    /// (see `HTTPURL.plainHTTPTarget`).
    init?(url: String) {
        guard let target = HTTPURL(url)?.plainHTTPTarget else { return nil }
        self = target
    }

    init(host: String, port: UInt16, target: String, authority: String) {
        self.host = host
        self.port = port
        self.target = target
        self.authority = authority
    }
}

/// Whether libcurl would send plain HTTP through a proxy here (`http_proxy`, `ALL_PROXY`, ...): then
/// libcurl does the request, so that a proxy set up for the gateway keeps working.
func plainHTTPProxyConfigured() -> Bool {
    for name in ["http_proxy", "all_proxy", "ALL_PROXY"] {
        if let value = getenv(name), value.pointee != 0 { return true }
    }
    return false
}

/// The sockets of ``SocketHTTPClient``: one idle keep-alive connection per host and port.
final class SocketHTTPClient: Sendable {
    private struct Idle {
        var host: String
        var port: UInt16
        var fd: Int32
    }
    private let idle = Mutex<[Idle]>([])

    deinit {
        for connection in idle.withLock({ $0 }) { close(connection.fd) }
    }

    /// Runs one exchange on the calling thread (blocking; call it off the cooperative pool).
    func perform(_ request: HTTPRequest, to target: PlainHTTPTarget, cancelled: @Sendable () -> Bool) -> Result<HTTPResponse, HTTPError> {
        let deadline = Clock.now() + Int64(max(1, request.timeoutMs))
        let wire = Self.encode(request, target)
        /// The exchange on `fd`, which is then kept or closed; nil when a reused connection turned out stale.
        func attempt(_ fd: Int32, reused: Bool) -> Result<HTTPResponse, HTTPError>? {
            switch exchange(fd: fd, wire: wire, request: request, deadline: deadline, cancelled: cancelled, reused: reused) {
            case .done(let result, let keep):
                finish(fd, target, keep: keep)
                return result
            case .staleConnection:
                close(fd)
                return nil
            }
        }
        if let fd = takeIdle(target), let result = attempt(fd, reused: true) { return result }
        let fd: Int32
        switch connect(target, connectTimeoutMs: max(1, request.connectTimeoutMs), deadline: deadline, cancelled: cancelled) {
        case .success(let opened): fd = opened
        case .failure(let error): return .failure(error)
        }
        return attempt(fd, reused: false) ?? .failure(.connectionLost)
    }

    /// The kept connection to `target`, if there is one the server has not closed: an idle connection
    /// with anything to read (the server's close, a reset, or bytes no request asked for) is closed.
    private func takeIdle(_ target: PlainHTTPTarget) -> Int32? {
        let fd = idle.withLock { list -> Int32? in
            guard let index = list.firstIndex(where: { $0.host == target.host && $0.port == target.port }) else { return nil }
            return list.remove(at: index).fd
        }
        guard let fd else { return nil }
        var pfd = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)  // a close reads as end of file; a reset sets POLLERR/POLLHUP
        if poll(&pfd, 1, 0) != 0 {
            close(fd)
            return nil
        }
        return fd
    }

    private func finish(_ fd: Int32, _ target: PlainHTTPTarget, keep: Bool) {
        guard keep else {
            close(fd)
            return
        }
        let replaced = idle.withLock { list -> Int32? in
            var old: Int32?
            if let index = list.firstIndex(where: { $0.host == target.host && $0.port == target.port }) {
                old = list.remove(at: index).fd
            }
            list.append(Idle(host: target.host, port: target.port, fd: fd))
            return old
        }
        if let replaced { close(replaced) }
    }

    static func encode(_ request: HTTPRequest, _ target: PlainHTTPTarget) -> [UInt8] {
        var head = "\(request.method) \(target.target) HTTP/1.1\r\nHost: \(target.authority)\r\n"
        var names: Set<String> = []
        for (name, value) in request.headers {
            names.insert(name.lowercased())
            // An empty value removes the header, as it does for libcurl (`Expect:`).
            // Bytes, not Characters: "\r\n" is one Character and would slip past a Character test.
            guard !value.isEmpty, !name.isEmpty, !name.utf8.contains(where: { $0 == 13 || $0 == 10 || $0 == UInt8(ascii: ":") }),
                  !value.utf8.contains(where: { $0 == 13 || $0 == 10 }) else { continue }
            head += "\(name): \(value)\r\n"
        }
        if !names.contains("accept") { head += "Accept: */*\r\n" }
        if request.method != "GET" || !request.body.isEmpty {
            head += "Content-Length: \(request.body.count)\r\n"
        }
        head += "\r\n"
        return Array(head.utf8) + (request.method == "GET" ? [] : request.body)
    }

    // MARK: - Connecting

    private func connect(_ target: PlainHTTPTarget, connectTimeoutMs: Int, deadline: Int64,
                         cancelled: () -> Bool) -> Result<Int32, HTTPError> {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var list: UnsafeMutablePointer<addrinfo>?
        // An address literal (127.0.0.1, ::1) needs no look-up: resolved as such, without the interface
        // query that AI_ADDRCONFIG makes on every call. A name is resolved with AI_ADDRCONFIG.
        hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV
        if getaddrinfo(target.host, String(target.port), &hints, &list) != 0 {
            list = nil
            hints.ai_flags = AI_ADDRCONFIG
            guard getaddrinfo(target.host, String(target.port), &hints, &list) == 0 else { return .failure(.resolveFailed) }
        }
        guard let first = list else { return .failure(.resolveFailed) }
        defer { freeaddrinfo(list) }
        let connectDeadline = min(deadline, Clock.now() + Int64(connectTimeoutMs))
        var lastError: HTTPError = .unreachable
        var entry: UnsafeMutablePointer<addrinfo>? = first
        while let info = entry {
            entry = info.pointee.ai_next
            let fd = socket(info.pointee.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue) | Int32(SOCK_NONBLOCK.rawValue), 0)
            guard fd >= 0 else { continue }
            var one: Int32 = 1
            _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
            if Glibc.connect(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0 { return .success(fd) }
            guard errno == EINPROGRESS else {
                lastError = Self.connectError(errno)
                close(fd)
                continue
            }
            switch wait(fd, events: Int16(POLLOUT), until: connectDeadline, cancelled: cancelled) {
            case .ready:
                var soError: Int32 = 0
                var length = socklen_t(MemoryLayout<Int32>.size)
                _ = getsockopt(fd, SOL_SOCKET, SO_ERROR, &soError, &length)
                if soError == 0 { return .success(fd) }
                lastError = Self.connectError(soError)
                close(fd)
            case .timedOut:
                close(fd)
                return .failure(.timedOut(connected: false))
            case .cancelled:
                close(fd)
                return .failure(.cancelled)
            }
        }
        return .failure(lastError)
    }

    private static func connectError(_ code: Int32) -> HTTPError {
        switch code {
        case ECONNREFUSED: .connectionRefused
        case ETIMEDOUT: .timedOut(connected: false)
        default: .unreachable
        }
    }

    private enum Readiness { case ready, timedOut, cancelled }

    /// Waits for `events` in slices of at most 100 ms, so that a cancelled request ends soon.
    private func wait(_ fd: Int32, events: Int16, until deadline: Int64, cancelled: () -> Bool) -> Readiness {
        while true {
            if cancelled() { return .cancelled }
            let left = deadline - Clock.now()
            if left <= 0 { return .timedOut }
            var pfd = pollfd(fd: fd, events: events, revents: 0)
            let n = poll(&pfd, 1, Int32(min(left, 100)))
            if n > 0 { return .ready }
            if n < 0 && errno != EINTR { return .ready }  // the following call reports the error
        }
    }

    // MARK: - One exchange

    private enum Exchange {
        /// The result, and whether the connection can carry the next request.
        case done(Result<HTTPResponse, HTTPError>, keep: Bool)
        /// Writing the request to a kept connection failed: the server cannot have had all of it.
        case staleConnection
    }

    private func exchange(fd: Int32, wire: [UInt8], request: HTTPRequest, deadline: Int64,
                          cancelled: () -> Bool, reused: Bool) -> Exchange {
        var sent = 0
        while sent < wire.count {
            let n = wire.withUnsafeBytes { send(fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
            if n > 0 {
                sent += n
                continue
            }
            if n < 0 && errno == EINTR { continue }
            if n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) {
                switch wait(fd, events: Int16(POLLOUT), until: deadline, cancelled: cancelled) {
                case .ready: continue
                case .timedOut: return .done(.failure(.timedOut(connected: true)), keep: false)
                case .cancelled: return .done(.failure(.cancelled), keep: false)
                }
            }
            return reused ? .staleConnection : .done(.failure(.connectionLost), keep: false)
        }
        var reader = AnswerReader(limit: max(0, min(request.maxResponseBytes, HTTPRequest.maximumResponseBytes)),
                                  headOnly: request.method == "HEAD")
        var buffer = [UInt8](repeating: 0, count: 16 << 10)
        while true {
            // Checked on every turn, not only when the socket runs dry: a server that never stops sending
            // (interim answers, a trickled body) must still meet the timeout and a cancellation.
            if cancelled() { return .done(.failure(.cancelled), keep: false) }
            if Clock.now() >= deadline { return .done(.failure(.timedOut(connected: true)), keep: false) }
            let n = buffer.withUnsafeMutableBytes { recv(fd, $0.baseAddress, $0.count, 0) }
            if n > 0 {
                switch reader.feed(buffer[0..<n]) {
                case .more: continue
                case .complete(let response, let keep): return .done(.success(response), keep: keep)
                case .failed(let error): return .done(.failure(error), keep: false)
                }
            }
            if n == 0 {
                switch reader.end() {
                case .complete(let response, _): return .done(.success(response), keep: false)
                case .failed(let error): return .done(.failure(error), keep: false)
                case .more: return .done(.failure(.connectionLost), keep: false)
                }
            }
            if errno == EINTR { continue }
            if errno == EAGAIN || errno == EWOULDBLOCK {
                switch wait(fd, events: Int16(POLLIN), until: deadline, cancelled: cancelled) {
                case .ready: continue
                case .timedOut: return .done(.failure(.timedOut(connected: true)), keep: false)
                case .cancelled: return .done(.failure(.cancelled), keep: false)
                }
            }
            return .done(.failure(.connectionLost), keep: false)
        }
    }
}

/// Milliseconds on the monotonic clock.
private enum Clock {
    static func now() -> Int64 {
        var ts = timespec()
        clock_gettime(CLOCK_MONOTONIC, &ts)
        return Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000
    }
}

/// Parses one HTTP/1.x answer as its bytes arrive: status line, headers, then a body by `Content-Length`,
/// `chunked`, or up to the close, capped at `limit`.
///
/// Everything that is not body counts against one head limit of 64 KiB (as for libcurl): the final
/// head, every interim 1xx answer before it and the chunked trailer, so a server that sends interim
/// answers or trailer lines without end is cut off. Lines may end in CRLF or a bare LF (RFC 9112 2.2,
/// as libcurl reads them); numbers are digits only: a status of exactly three, a `Content-Length` and a
/// chunk size without sign or blanks.
struct AnswerReader {
    enum Step: Equatable {
        case more
        /// The answer, and whether the connection stays usable.
        case complete(HTTPResponse, keep: Bool)
        case failed(HTTPError)
    }

    let limit: Int
    let headOnly: Bool
    private var pending: [UInt8] = []
    private var status = 0
    private var headers: [String: String] = [:]
    private var keepAlive = false
    private var inBody = false
    private enum Framing { case length(Int), chunked, untilClose }
    private var framing = Framing.untilClose
    private var body: [UInt8] = []
    /// Chunked: bytes left in the current chunk; nil while a size line is expected.
    private var chunkLeft: Int?
    private var inTrailer = false
    /// Bytes of heads (interim and final) and trailer lines read so far.
    private var headBytes = 0
    /// Where the search for the end of the head goes on in `pending` (what was searched holds no end).
    private var headScanned = 0
    static let headerLimit = 64 << 10

    init(limit: Int, headOnly: Bool = false) {
        self.limit = limit
        self.headOnly = headOnly
    }

    mutating func feed(_ bytes: ArraySlice<UInt8>) -> Step {
        pending.append(contentsOf: bytes)
        while true {
            if !inBody {
                guard let (end, next) = Self.findHeadEnd(pending, from: headScanned) else {
                    headScanned = max(0, pending.count - 3)
                    return headBytes + pending.count > Self.headerLimit ? .failed(.headersTooLong) : .more
                }
                headBytes += next
                if headBytes > Self.headerLimit { return .failed(.headersTooLong) }
                let head = Array(pending[..<end])
                pending.removeFirst(next)
                headScanned = 0
                switch parseHead(head) {
                case .failed(let error): return .failed(error)
                case .interim: continue
                case .final: break
                }
                inBody = true
                if headOnly || status == 204 || status == 304 {
                    return .complete(HTTPResponse(status: status, headers: headers), keep: keepAlive)
                }
            }
            return bodyStep()
        }
    }

    /// The connection closed.
    mutating func end() -> Step {
        if inBody, case .untilClose = framing {
            return .complete(HTTPResponse(status: status, headers: headers, body: body), keep: false)
        }
        return .more
    }

    private enum Head { case interim, final, failed(HTTPError) }

    private mutating func parseHead(_ head: [UInt8]) -> Head {
        let lines = head.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).map { line in
            line.last == UInt8(ascii: "\r") ? line.dropLast() : line
        }
        // An all-ASCII head (every answer a server is expected to send) is read byte by byte; any other
        // as text, character by character, exactly as before there was a byte path.
        let parsed = head.allSatisfy({ $0 < 0x80 }) ? Self.asciiHead(lines) : Self.textHead(lines)
        guard let (statusLine, code, fields) = parsed else { return .failed(.other("not an HTTP answer")) }
        if (100...199).contains(code) { return .interim }
        status = code
        headers = fields
        let connection = headers["connection"]?.lowercased() ?? ""
        keepAlive = statusLine.hasPrefix("HTTP/1.1") ? !connection.containsBytes("close") : connection.containsBytes("keep-alive")
        if let encoding = headers["transfer-encoding"]?.lowercased(), encoding.containsBytes("chunked") {
            framing = .chunked
        } else if let text = headers["content-length"] {
            guard let length = Self.decimal(text) else { return .failed(.other("invalid Content-Length in the answer")) }
            framing = .length(length)
            if length > limit { return .failed(.tooLarge(limit: limit, status: status)) }
        } else {
            framing = .untilClose
            keepAlive = false
        }
        return .final
    }

    private typealias ParsedHead = (statusLine: String, code: Int, headers: [String: String])

    /// Exactly three digits, the first not 0 (RFC 9112 4: `status-code = 3DIGIT`).
    private static func statusCode(_ field: Substring) -> Int? {
        guard field.utf8.count == 3, let code = decimal(field), (100...999).contains(code) else { return nil }
        return code
    }

    /// ASCII digits only (no sign, no blanks), at most 18 of them so the value always fits.
    static func decimal(_ text: some StringProtocol) -> Int? {
        let digits = text.utf8
        guard !digits.isEmpty, digits.count <= 18, digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return digits.reduce(0) { $0 * 10 + Int($1 - 0x30) }
    }

    /// A chunk-size line: 1 to 15 hex digits, then nothing or an extension (`;` after optional blanks).
    static func chunkSize(_ line: ArraySlice<UInt8>) -> Int? {
        let digits = line.prefix { ($0 >= 0x30 && $0 <= 0x39) || ($0 | 0x20 >= 0x61 && $0 | 0x20 <= 0x66) }
        guard !digits.isEmpty, digits.count <= 15 else { return nil }
        let rest = line[digits.endIndex...]
        guard rest.isEmpty || rest.drop(while: { $0 == UInt8(ascii: " ") || $0 == UInt8(ascii: "\t") }).first == UInt8(ascii: ";") else {
            return nil
        }
        return digits.reduce(0) { value, b in
            let nibble = b <= 0x39 ? Int(b - 0x30) : Int((b | 0x20) - 0x61 + 10)
            return value << 4 | nibble
        }
    }

    /// Status line and headers of an all-ASCII head: names in lower case, values without the spaces and
    /// tabs around them.
    private static func asciiHead(_ lines: [ArraySlice<UInt8>]) -> ParsedHead? {
        guard let first = lines.first, first.starts(with: "HTTP/1.".utf8) else { return nil }
        let statusLine = String(decoding: first, as: UTF8.self)
        let fields = statusLine.split(separator: " ", maxSplits: 2)
        guard fields.count >= 2, let code = statusCode(fields[1]) else { return nil }
        var headers: [String: String] = [:]
        func blank(_ b: UInt8) -> Bool { b == UInt8(ascii: " ") || b == UInt8(ascii: "\t") }
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: UInt8(ascii: ":")) else { continue }
            let name = String(decoding: line[..<colon].map { $0 >= 0x41 && $0 <= 0x5A ? $0 + 0x20 : $0 }, as: UTF8.self)
            var value = line[(colon + 1)...]
            while let b = value.first, blank(b) { value = value.dropFirst() }
            while let b = value.last, blank(b) { value = value.dropLast() }
            headers[name] = String(decoding: value, as: UTF8.self)
        }
        return (statusLine, code, headers)
    }

    /// The same from a head with other bytes, read as text (invalid UTF-8 repaired).
    private static func textHead(_ byteLines: [ArraySlice<UInt8>]) -> ParsedHead? {
        let lines = byteLines.map { String(decoding: $0, as: UTF8.self) }
        guard let statusLine = lines.first, statusLine.hasPrefix("HTTP/1.") else { return nil }
        let fields = statusLine.split(separator: " ", maxSplits: 2)
        guard fields.count >= 2, let code = statusCode(fields[1]) else { return nil }
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
            guard let colon = line.firstIndex(of: ":") else { continue }
            let name = line[..<colon].lowercased()
            let value = String(line[line.index(after: colon)...].drop(while: { $0 == " " || $0 == "\t" }).reversed()
                .drop(while: { $0 == " " || $0 == "\t" }).reversed())
            headers[name] = value
        }
        return (statusLine, code, headers)
    }

    private mutating func bodyStep() -> Step {
        switch framing {
        case .length(let length):
            let take = min(length - body.count, pending.count)
            body.append(contentsOf: pending[..<take])
            pending.removeFirst(take)
            if body.count == length {
                return .complete(HTTPResponse(status: status, headers: headers, body: body), keep: keepAlive && pending.isEmpty)
            }
            return .more
        case .untilClose:
            if body.count + pending.count > limit { return .failed(.tooLarge(limit: limit, status: status)) }
            body.append(contentsOf: pending)
            pending.removeAll()
            return .more
        case .chunked:
            while true {
                if inTrailer {
                    // Trailer lines up to an empty one, counted against the head limit.
                    guard let (lineEnd, next) = Self.findLineEnd(pending) else {
                        return headBytes + pending.count > Self.headerLimit ? .failed(.headersTooLong) : .more
                    }
                    headBytes += next
                    if headBytes > Self.headerLimit { return .failed(.headersTooLong) }
                    let empty = lineEnd == 0
                    pending.removeFirst(next)
                    if empty {
                        return .complete(HTTPResponse(status: status, headers: headers, body: body), keep: keepAlive && pending.isEmpty)
                    }
                    continue
                }
                if let left = chunkLeft {
                    if left > 0 {
                        let take = min(left, pending.count)
                        if body.count + take > limit { return .failed(.tooLarge(limit: limit, status: status)) }
                        body.append(contentsOf: pending[..<take])
                        pending.removeFirst(take)
                        chunkLeft = left - take
                        if left - take > 0 { return .more }
                    }
                    // The chunk's data ends with CRLF or a bare LF.
                    guard let first = pending.first else { return .more }
                    if first == 10 {
                        pending.removeFirst(1)
                    } else {
                        guard pending.count >= 2 else { return .more }
                        guard first == 13, pending[1] == 10 else { return .failed(.other("malformed chunked answer")) }
                        pending.removeFirst(2)
                    }
                    chunkLeft = nil
                    continue
                }
                guard let (lineEnd, next) = Self.findLineEnd(pending) else {
                    return pending.count > 1024 ? .failed(.other("malformed chunked answer")) : .more
                }
                guard lineEnd <= 1024, let size = Self.chunkSize(pending[..<lineEnd]) else {
                    return .failed(.other("malformed chunked answer"))
                }
                pending.removeFirst(next)
                if size == 0 {
                    inTrailer = true
                } else {
                    if body.count + size > limit { return .failed(.tooLarge(limit: limit, status: status)) }
                    chunkLeft = size
                }
            }
        }
    }

    /// The end of a head: an empty line after a line end, each line end CRLF or a bare LF. Returns where
    /// the head's last line ends (its line end excluded) and where the body starts; the search starts
    /// at `from`, before which no end was found.
    static func findHeadEnd(_ bytes: [UInt8], from: Int) -> (end: Int, next: Int)? {
        var i = max(0, from)
        while i < bytes.count {
            if bytes[i] == 10 {
                if i + 1 < bytes.count, bytes[i + 1] == 10 {
                    return (i > 0 && bytes[i - 1] == 13 ? i - 1 : i, i + 2)
                }
                if i + 2 < bytes.count, bytes[i + 1] == 13, bytes[i + 2] == 10 {
                    return (i > 0 && bytes[i - 1] == 13 ? i - 1 : i, i + 3)
                }
            }
            i += 1
        }
        return nil
    }

    /// The end of the first line: its length without the line end (CRLF or LF), and where the next starts.
    static func findLineEnd(_ bytes: [UInt8]) -> (end: Int, next: Int)? {
        guard let lf = bytes.firstIndex(of: 10) else { return nil }
        return (lf > 0 && bytes[lf - 1] == 13 ? lf - 1 : lf, lf + 1)
    }
}


