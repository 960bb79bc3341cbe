import Dispatch
import Synchronization
import Testing
import TestSupport
@testable import Transport
#if canImport(Glibc)
import Glibc
#endif

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
        let socket = try LoopbackSocket()
        let fd = socket.descriptor
        listener = fd
        port = socket.port
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
            let outcome = await postEntries(port: port, timeoutMs: timeoutMs)
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
