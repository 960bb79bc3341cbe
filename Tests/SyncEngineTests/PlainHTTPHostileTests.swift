import Dispatch
import Synchronization
import Testing
import TestSupport
@testable import SyncEngine
@testable import Transport
#if canImport(Glibc)
import Glibc
#endif

/// Feeds `answer` in pieces of `step` bytes; returns the first step that is not `.more`, or the end's.
private func feed(_ answer: [UInt8], step: Int, limit: Int = 1 << 20) -> AnswerReader.Step {
    var reader = AnswerReader(limit: limit)
    var at = 0
    while at < answer.count {
        let piece = answer[at..<min(answer.count, at + step)]
        at += piece.count
        let result = reader.feed(piece)
        if result != .more { return result }
    }
    return reader.end()
}

private func feed(_ answer: String, step: Int, limit: Int = 1 << 20) -> AnswerReader.Step {
    feed(Array(answer.utf8), step: step, limit: limit)
}

@Suite("Plain HTTP: answers from broken and hostile servers")
struct PlainHTTPHostileParsingTests {
    /// Interim answers and trailer lines count against the 64 KiB head limit, so a server that sends them
    /// without end is cut off with an error that says what was too long.
    @Test(arguments: [25, 4096, 16_384])
    func endlessInterimAnswersAndTrailersMeetTheHeadLimit(step: Int) {
        let interim = String(repeating: "HTTP/1.1 100 Continue\r\n\r\n", count: 3000)
        #expect(feed(interim, step: step) == .failed(.headersTooLong))
        let trailer = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n[]\r\n0\r\n" + String(repeating: "X-T: y\r\n", count: 9000)
        #expect(feed(trailer, step: step) == .failed(.headersTooLong))
        // A few interim answers before the real one are fine.
        let some = String(repeating: "HTTP/1.1 100 Continue\r\n\r\n", count: 100) + "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n[]"
        #expect(feed(some, step: step) == .complete(HTTPResponse(status: 200, headers: ["content-length": "2"], body: Array("[]".utf8)), keep: true))
    }

    @Test func anOversizedHeadSaysSo() {
        let head = "HTTP/1.1 200 OK\r\n" + String(repeating: "X-A: b\r\n", count: 10_000)
        let result = feed(head, step: 4096, limit: 39_424)
        #expect(result == .failed(.headersTooLong))
        #expect(HTTPError.headersTooLong.description == "answer headers longer than 64 KiB")
    }

    /// RFC 9112 2.2: a recipient may take a bare LF as a line end (libcurl does).
    @Test(arguments: [1, 3, 4096])
    func bareLineFeedAnswersAreRead(step: Int) {
        let length = "HTTP/1.1 200 OK\nContent-Type: application/json\nContent-Length: 5\n\n[1,2]"
        #expect(feed(length, step: step) == .complete(HTTPResponse(status: 200, headers: ["content-type": "application/json", "content-length": "5"],
                                                                   body: Array("[1,2]".utf8)), keep: true))
        let chunked = "HTTP/1.1 100 Continue\n\nHTTP/1.1 201 Created\nTransfer-Encoding: chunked\n\n3;x=y\n[1,\n2\r\n2]\n0\nTrailer: z\n\n"
        #expect(feed(chunked, step: step) == .complete(HTTPResponse(status: 201, headers: ["transfer-encoding": "chunked"],
                                                                    body: Array("[1,2]".utf8)), keep: true))
        let mixed = "HTTP/1.1 200 OK\r\nContent-Length: 2\n\r\n[]"
        #expect(feed(mixed, step: step) == .complete(HTTPResponse(status: 200, headers: ["content-length": "2"], body: Array("[]".utf8)), keep: true))
    }

    struct Case: CustomTestStringConvertible, Sendable {
        var name: String
        var answer: String
        var error: HTTPError
        var testDescription: String { name }
    }

    static let loose: [Case] = [
        Case(name: "Content-Length +2", answer: "HTTP/1.1 200 OK\r\nContent-Length: +2\r\n\r\n[]", error: .other("invalid Content-Length in the answer")),
        Case(name: "Content-Length -0", answer: "HTTP/1.1 200 OK\r\nContent-Length: -0\r\n\r\n", error: .other("invalid Content-Length in the answer")),
        Case(name: "Content-Length 2 2", answer: "HTTP/1.1 200 OK\r\nContent-Length: 2 2\r\n\r\n[]", error: .other("invalid Content-Length in the answer")),
        Case(name: "Content-Length beyond Int", answer: "HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
             error: .other("invalid Content-Length in the answer")),
        Case(name: "chunk size +2", answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n+2\r\n[]\r\n0\r\n\r\n", error: .other("malformed chunked answer")),
        Case(name: "chunk size ' 2 '", answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n 2 \r\n[]\r\n0\r\n\r\n", error: .other("malformed chunked answer")),
        Case(name: "chunk size '2 '", answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2 \r\n[]\r\n0\r\n\r\n", error: .other("malformed chunked answer")),
        Case(name: "chunk size 0x2", answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x2\r\n[]\r\n0\r\n\r\n", error: .other("malformed chunked answer")),
        Case(name: "chunk size of 16 hex digits", answer: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n", error: .other("malformed chunked answer")),
        Case(name: "status 0200", answer: "HTTP/1.1 0200 OK\r\nContent-Length: 0\r\n\r\n", error: .other("not an HTTP answer")),
        Case(name: "status +200", answer: "HTTP/1.1 +200 OK\r\nContent-Length: 0\r\n\r\n", error: .other("not an HTTP answer")),
        Case(name: "status 099", answer: "HTTP/1.1 099 OK\r\nContent-Length: 0\r\n\r\n", error: .other("not an HTTP answer")),
    ]

    /// Numbers are digits only: no sign, no blanks, no leading-zero status.
    @Test(arguments: loose)
    func looseNumbersAreRefused(_ c: Case) {
        #expect(feed(c.answer, step: 4096) == .failed(c.error))
    }

    /// A chunk extension may follow the size after blanks (RFC 9112 7.1.1, BWS before `;`).
    @Test func aChunkExtensionAfterBlanksIsRead() {
        let answer = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2 ;name=value\r\n[]\r\n0\r\n\r\n"
        #expect(feed(answer, step: 5) == .complete(HTTPResponse(status: 200, headers: ["transfer-encoding": "chunked"], body: Array("[]".utf8)), keep: true))
    }
}

/// A loopback server that, for each connection, reads the request head and then writes `prefix` once
/// and `repeated` again and again (every `pauseMs`) until the client goes away or `stop()` is called.
private final class StreamingServer: @unchecked Sendable {
    // @unchecked: `port` and `listener` are set in init; the stop flag is atomic.
    let port: UInt16
    private let listener: Int32
    private final class Flag: Sendable {
        let stopped = Atomic<Bool>(false)
    }
    private let flag = Flag()

    init(prefix: String, repeated: String, pauseMs: Int = 0) throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        listener = fd
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 && listen(fd, 8) == 0 && getsockname(fd, $0, &length) == 0
            }
        }
        guard bound else { throw HTTPError.other("cannot listen") }
        port = UInt16(bigEndian: address.sin_port)
        let first = Array(prefix.utf8)
        let again = Array(repeated.utf8)
        let flag = self.flag
        DispatchQueue(label: "streaming-server").async {
            while true {
                let client = accept(fd, nil, nil)
                guard client >= 0 else {
                    close(fd)
                    return
                }
                DispatchQueue.global().async {
                    var buffer = [UInt8](repeating: 0, count: 65536)
                    var seen: [UInt8] = []
                    while AnswerReader.findHeadEnd(seen, from: 0) == nil {
                        let n = buffer.withUnsafeMutableBytes { recv(client, $0.baseAddress, $0.count, 0) }
                        if n <= 0 { break }
                        seen += buffer[0..<n]
                    }
                    var chunk = first
                    while !flag.stopped.load(ordering: .relaxed) {
                        let n = chunk.withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
                        if n < 0 { break }
                        chunk = again
                        if pauseMs > 0 { usleep(UInt32(pauseMs * 1000)) }
                    }
                    close(client)
                }
            }
        }
    }

    func stop() {
        flag.stopped.store(true, ordering: .relaxed)
        shutdown(listener, Int32(SHUT_RDWR))
    }
}

@Suite("Plain HTTP over loopback: servers that never stop sending")
struct PlainHTTPEndlessServerTests {
    /// Runs one request in the background; the result, or nil when it has not ended within 15 s (a liveness
    /// bound: the server is then stopped, which frees the request).
    fileprivate func request(port: UInt16, timeoutMs: Int, server: StreamingServer) async -> Result<HTTPResponse, HTTPError>? {
        let result = Mutex<Result<HTTPResponse, HTTPError>?>(nil)
        let task = Task {
            let request = HTTPRequest(method: "POST", url: "http://127.0.0.1:\(port)/api/v1/entries", body: Array("[]".utf8),
                                      connectTimeoutMs: 2000, timeoutMs: timeoutMs)
            let outcome: Result<HTTPResponse, HTTPError>
            do throws(HTTPError) { outcome = .success(try await CurlHTTPClient().send(request)) } catch { outcome = .failure(error) }
            result.withLock { $0 = outcome }
        }
        let ended = await waitUntil(15) { result.withLock { $0 != nil } }
        server.stop()
        await task.value
        return ended ? result.withLock { $0 } : nil
    }

    /// A server that answers "100 Continue" without pause: the request ends with the head limit's error
    /// well before the liveness bound, however fast the interim answers come.
    @Test func endlessInterimAnswersEndTheRequest() async throws {
        let server = try StreamingServer(prefix: "", repeated: String(repeating: "HTTP/1.1 100 Continue\r\n\r\n", count: 40))
        let result = await request(port: server.port, timeoutMs: 2000, server: server)
        #expect(result == .failure(.headersTooLong))
    }

    /// Trailer lines without end, likewise.
    @Test func endlessTrailerLinesEndTheRequest() async throws {
        let server = try StreamingServer(prefix: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n[]\r\n0\r\n",
                                         repeated: String(repeating: "X-Trailer: more\r\n", count: 50))
        let result = await request(port: server.port, timeoutMs: 2000, server: server)
        #expect(result == .failure(.headersTooLong))
    }

    /// A body trickled without end (chunks of one byte, every 5 ms) meets the request's timeout.
    @Test func aTrickledBodyMeetsTheTimeout() async throws {
        let server = try StreamingServer(prefix: "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", repeated: "1\r\nx\r\n", pauseMs: 5)
        let result = await request(port: server.port, timeoutMs: 500, server: server)
        #expect(result == .failure(.timedOut(connected: true)))
    }
}
