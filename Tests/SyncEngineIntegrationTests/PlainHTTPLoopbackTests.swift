import Dispatch
import Synchronization
import Testing
import TestSupport
import Transport
#if canImport(Glibc)
import Glibc
#endif

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
        let socket = try LoopbackSocket()
        let listener = socket.descriptor
        fd = listener
        port = socket.port
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

    @Test func keptConnectionCarriesTheNextRequest() async throws {
        let server = try CannedServer(answers: [ok], closeAfterEach: false)
        defer { server.stop() }
        let client = CurlHTTPClient()
        for _ in 0..<3 { #expect(try await postEntries(client, port: server.port).get().status == 200) }
        #expect(server.counts.accepted.load(ordering: .relaxed) == 1)
    }

    @Test func aConnectionTheServerClosedIsReplacedOnce() async throws {
        // HTTP/1.1 without "Connection: close", then the server closes: the kept connection is seen closed
        // before the next request is written, and that request goes out on a new one.
        let server = try CannedServer(answers: [ok], closeAfterEach: true)
        defer { server.stop() }
        let client = CurlHTTPClient()
        #expect(try await postEntries(client, port: server.port).get().status == 200)
        // Only once the server has closed it is the connection closed for the client to see: before that,
        // a request written on it may have reached the server, which the client must never send twice.
        #expect(await waitUntil(5) { server.counts.closed.load(ordering: .relaxed) == 1 })
        #expect(try await postEntries(client, port: server.port).get().status == 200)
        #expect(server.counts.accepted.load(ordering: .relaxed) == 2)
        #expect(server.counts.requests.load(ordering: .relaxed) == 2)
    }

    @Test func aRequestTheServerTookIsNotSentAgain() async throws {
        // The kept connection carried the whole request before the server closed it: the server may have
        // stored it, so the outcome is the caller's to judge (connection lost), not a second request.
        let server = try CannedServer(answers: [ok], closeAfterEach: false, closeUnansweredAfter: 1)
        defer { server.stop() }
        let client = CurlHTTPClient()
        #expect(try await postEntries(client, port: server.port).get().status == 200)
        #expect(await postEntries(client, port: server.port) == .failure(.connectionLost))
        #expect(server.counts.requests.load(ordering: .relaxed) == 2)
        #expect(server.counts.accepted.load(ordering: .relaxed) == 1)
    }

    @Test func refusedAndSilentServers() async throws {
        let server = try CannedServer(answers: [ok], closeAfterEach: false)
        let port = server.port
        server.stop()
        #expect(await postEntries(CurlHTTPClient(), port: port) == .failure(.connectionRefused))

        let silent = try CannedServer(answers: [ok], closeAfterEach: false, silent: true)
        defer { silent.stop() }
        #expect(await postEntries(CurlHTTPClient(), port: silent.port, timeoutMs: 300) == .failure(.timedOut(connected: true)))
    }
}
