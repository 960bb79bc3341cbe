import Dispatch
import Synchronization
import Testing
import TestSupport
@testable import Transport
@testable import SyncEngine
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
