import Dispatch
import Synchronization
import Testing
import TestSupport
@testable import SyncEngine
@testable import Transport
#if canImport(Glibc)
import Glibc
#endif

@Suite("Plain HTTP: URLs it takes, answers it parses")
struct PlainHTTPParsingTests {
    @Test func urlsItTakesAndLeavesToLibcurl() {
        let t = PlainHTTPTarget(url: "http://127.0.0.1:1337/api/v1/entries")
        #expect(t?.host == "127.0.0.1" && t?.port == 1337 && t?.target == "/api/v1/entries" && t?.authority == "127.0.0.1:1337")
        #expect(PlainHTTPTarget(url: "HTTP://ns.local")?.target == "/")
        #expect(PlainHTTPTarget(url: "http://ns.local")?.port == 80)
        #expect(PlainHTTPTarget(url: "http://ns.local?token=x")?.target == "/?token=x")
        for url in ["https://ns.example/api", "http://user:pw@ns.local/", "http://[::1]:80/", "http://ns.local/a#b",
                    "http://ns.local:0/", "http://ns.local:99999/", "http:///path", "ftp://ns.local/", "http://ns.local/a b"] {
            #expect(PlainHTTPTarget(url: url) == nil, "\(url)")
        }
    }

    @Test func requestCarriesHostLengthAndDropsEmptyHeaders() {
        let target = PlainHTTPTarget(url: "http://127.0.0.1:8080/api/v1/entries")!
        let request = HTTPRequest(method: "POST", url: "http://127.0.0.1:8080/api/v1/entries",
                                  headers: [("api-secret", "abc"), ("Expect", ""), ("Bad\r\nHeader", "x")],
                                  body: Array("[]".utf8), connectTimeoutMs: 100, timeoutMs: 100)
        let text = String(decoding: SocketHTTPClient.encode(request, target), as: UTF8.self)
        #expect(text == "POST /api/v1/entries HTTP/1.1\r\nHost: 127.0.0.1:8080\r\napi-secret: abc\r\nAccept: */*\r\nContent-Length: 2\r\n\r\n[]")
    }

    /// Feeds `answer` in pieces of `step` bytes; returns the last step.
    func feed(_ answer: String, step: Int, limit: Int = 1 << 20) -> AnswerReader.Step {
        var reader = AnswerReader(limit: limit)
        let bytes = Array(answer.utf8)
        var at = 0
        while at < bytes.count {
            let piece = bytes[at..<min(bytes.count, at + step)]
            at += piece.count
            let step = reader.feed(piece)
            if step != .more { return step }
        }
        return reader.end()
    }

    @Test(arguments: [1, 2, 7, 4096])
    func lengthChunkedInterimAndCloseDelimited(step: Int) {
        let length = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 5\r\n\r\n[1,2]"
        #expect(feed(length, step: step) == .complete(HTTPResponse(status: 200, headers: ["content-type": "application/json", "content-length": "5"], body: Array("[1,2]".utf8)), keep: true))
        let chunked = "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\n[1,\r\n2\r\n2]\r\n0\r\nTrailer: z\r\n\r\n"
        #expect(feed(chunked, step: step) == .complete(HTTPResponse(status: 201, headers: ["transfer-encoding": "chunked"], body: Array("[1,2]".utf8)), keep: true))
        let close = "HTTP/1.0 503 Service Unavailable\r\nRetry-After: 2\r\n\r\nbusy"
        #expect(feed(close, step: step) == .complete(HTTPResponse(status: 503, headers: ["retry-after": "2"], body: Array("busy".utf8)), keep: false))
        let closing = "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
        #expect(feed(closing, step: step) == .complete(HTTPResponse(status: 200, headers: ["connection": "close", "content-length": "0"]), keep: false))
    }

    /// Header names in lower case, values without the blanks around them, whether the head is plain
    /// ASCII (read byte by byte) or holds other bytes (read as text), with the same result for the same
    /// header; a status line that is not HTTP/1.x or has no three-digit code is refused either way.
    @Test(arguments: [1, 5, 4096])
    func headersOfASCIIAndOtherHeads(step: Int) {
        let ascii = "HTTP/1.1 200 OK\r\nX-Mixed-CASE:  \t spaced value\t \r\nEmpty:\r\nno colon line\r\nRetry-After:3\r\nContent-Length: 2\r\n\r\n[]"
        #expect(feed(ascii, step: step) == .complete(HTTPResponse(status: 200, headers: [
            "x-mixed-case": "spaced value", "empty": "", "retry-after": "3", "content-length": "2",
        ], body: Array("[]".utf8)), keep: true))
        let other = "HTTP/1.1 200 Ok\u{e9}\r\nX-Mixed-CASE:  \t spaced value\t \r\nX-Name: Z\u{fc}rich \r\nContent-Length: 2\r\n\r\n[]"
        #expect(feed(other, step: step) == .complete(HTTPResponse(status: 200, headers: [
            "x-mixed-case": "spaced value", "x-name": "Z\u{fc}rich", "content-length": "2",
        ], body: Array("[]".utf8)), keep: true))
        for head in ["HTTP/2 200 OK", "HTTP/1.1 20 OK", "HTTP/1.1 OK", "http/1.1 200 OK", "HTTP/1.1 200\u{e9} OK"] {
            #expect(feed(head + "\r\nContent-Length: 0\r\n\r\n", step: step) == .failed(.other("not an HTTP answer")), "\(head)")
        }
    }

    @Test func longAnswersAndBrokenOnesAreErrors() {
        #expect(feed("HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n", step: 100, limit: 10) == .failed(.tooLarge(limit: 10, status: 200)))
        #expect(feed("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\n123456\r\n6\r\n123456\r\n0\r\n\r\n", step: 3, limit: 10)
                == .failed(.tooLarge(limit: 10, status: 200)))
        #expect(feed("HTTP/1.0 200 OK\r\n\r\n" + String(repeating: "x", count: 11), step: 4, limit: 10) == .failed(.tooLarge(limit: 10, status: 200)))
        #expect(feed("HTTP/1.1 200 OK\r\n" + String(repeating: "X-A: b\r\n", count: 10_000), step: 4096) == .failed(.headersTooLong))
        #expect(feed("SSH-2.0-OpenSSH\r\n\r\n", step: 100) == .failed(.other("not an HTTP answer")))
        #expect(feed("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", step: 100) == .failed(.other("malformed chunked answer")))
        // Cut short: no complete answer, so the caller reports the connection lost.
        #expect(feed("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n12345", step: 100) == .more)
    }
}

/// A loopback server that answers each request it reads with the next canned answer, on the same
/// connection or, after `closeAfter` answers, closing it.
private final class CannedServer: @unchecked Sendable {
    let port: UInt16
    private let fd: Int32
    final class Counts: Sendable {
        let accepted = Atomic<Int>(0)
        let requests = Atomic<Int>(0)
        /// Connections the server has closed.
        let closed = Atomic<Int>(0)
    }
    let counts = Counts()

    /// `closeUnansweredAfter`: once that many requests are answered, the next one is read in full and
    /// the connection closed without an answer (a server that took the request and then went away).
    init(answers: [String], closeAfterEach: Bool, silent: Bool = false, closeUnansweredAfter: Int? = nil) throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        fd = listener
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(listener, $0, length) == 0 && listen(listener, 8) == 0 && getsockname(listener, $0, &length) == 0
            }
        }
        guard bound else { throw HTTPError.other("cannot listen") }
        port = UInt16(bigEndian: address.sin_port)
        let counts = self.counts
        let queue = DispatchQueue(label: "canned-server")
        queue.async {
            var next = 0
            while true {
                let client = accept(listener, nil, nil)
                guard client >= 0 else {
                    // Closed here, not in stop(): the number must not name another test's socket while
                    // this loop may still use it.
                    close(listener)
                    return
                }
                counts.accepted.add(1, ordering: .relaxed)
                var buffer = [UInt8](repeating: 0, count: 65536)
                var text = ""
                while true {
                    let n = buffer.withUnsafeMutableBytes { recv(client, $0.baseAddress, $0.count, 0) }
                    if n <= 0 { break }
                    text += String(decoding: buffer[0..<n], as: UTF8.self)
                    guard let end = text.range(of: "\r\n\r\n") else { continue }
                    let head = text[..<end.lowerBound]
                    let bodyLength = head.split(separator: "\r\n").first(where: { $0.lowercased().hasPrefix("content-length:") })
                        .flatMap { Int(String($0.split(separator: ":")[1]).spacesTrimmed()) } ?? 0
                    guard text.utf8.count >= head.utf8.count + 4 + bodyLength else { continue }
                    text = ""
                    counts.requests.add(1, ordering: .relaxed)
                    if silent { continue }
                    if let limit = closeUnansweredAfter, next >= limit { break }
                    let answer = Array(answers[min(next, answers.count - 1)].utf8)
                    next += 1
                    _ = answer.withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                    if closeAfterEach { break }
                }
                close(client)
                counts.closed.add(1, ordering: .relaxed)
            }
        }
    }

    /// Ends the accept loop (the listening socket refuses connections from now on).
    func stop() {
        shutdown(fd, Int32(SHUT_RDWR))
    }
}

extension String {
    fileprivate func spacesTrimmed() -> String {
        String(drop(while: { $0 == " " }).reversed().drop(while: { $0 == " " }).reversed())
    }
}

@Suite("Plain HTTP over loopback")
struct PlainHTTPLoopbackTests {
    let ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]"

    func post(_ client: CurlHTTPClient, _ port: UInt16, timeoutMs: Int = 5000) async -> Result<HTTPResponse, HTTPError> {
        let request = HTTPRequest(method: "POST", url: "http://127.0.0.1:\(port)/api/v1/entries", body: Array("[]".utf8),
                                  connectTimeoutMs: 2000, timeoutMs: timeoutMs)
        do { return .success(try await client.send(request)) } catch { return .failure(error) }
    }

    @Test func keptConnectionCarriesTheNextRequest() async throws {
        let server = try CannedServer(answers: [ok], closeAfterEach: false)
        defer { server.stop() }
        let client = CurlHTTPClient()
        for _ in 0..<3 { #expect(try await post(client, server.port).get().status == 200) }
        #expect(server.counts.accepted.load(ordering: .relaxed) == 1)
    }

    @Test func aConnectionTheServerClosedIsReplacedOnce() async throws {
        // HTTP/1.1 without "Connection: close", then the server closes: the kept connection is seen closed
        // before the next request is written, and that request goes out on a new one.
        let server = try CannedServer(answers: [ok], closeAfterEach: true)
        defer { server.stop() }
        let client = CurlHTTPClient()
        #expect(try await post(client, server.port).get().status == 200)
        // Only once the server has closed it is the connection closed for the client to see: before that,
        // a request written on it may have reached the server, which the client must never send twice.
        #expect(await waitUntil(5) { server.counts.closed.load(ordering: .relaxed) == 1 })
        #expect(try await post(client, server.port).get().status == 200)
        #expect(server.counts.accepted.load(ordering: .relaxed) == 2)
        #expect(server.counts.requests.load(ordering: .relaxed) == 2)
    }

    @Test func aRequestTheServerTookIsNotSentAgain() async throws {
        // The kept connection carried the whole request before the server closed it: the server may have
        // stored it, so the outcome is the caller's to judge (connection lost), not a second request.
        let server = try CannedServer(answers: [ok], closeAfterEach: false, closeUnansweredAfter: 1)
        defer { server.stop() }
        let client = CurlHTTPClient()
        #expect(try await post(client, server.port).get().status == 200)
        #expect(await post(client, server.port) == .failure(.connectionLost))
        #expect(server.counts.requests.load(ordering: .relaxed) == 2)
        #expect(server.counts.accepted.load(ordering: .relaxed) == 1)
    }

    @Test func refusedAndSilentServers() async throws {
        let server = try CannedServer(answers: [ok], closeAfterEach: false)
        let port = server.port
        server.stop()
        #expect(await post(CurlHTTPClient(), port) == .failure(.connectionRefused))

        let silent = try CannedServer(answers: [ok], closeAfterEach: false, silent: true)
        defer { silent.stop() }
        #expect(await post(CurlHTTPClient(), silent.port, timeoutMs: 300) == .failure(.timedOut(connected: true)))
    }
}
