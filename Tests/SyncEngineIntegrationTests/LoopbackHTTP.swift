#if canImport(Glibc)
import Glibc
#endif
import Transport

/// A TCP socket bound to 127.0.0.1 at a port the kernel chose: the listening end of a test's own
/// server, or, closed at once, a free port for a server that runs as a child process.
struct LoopbackSocket {
    let descriptor: Int32
    let port: UInt16

    /// A new socket, listening with `backlog` (nil: only bound).
    init(listening backlog: Int32? = 8) throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw TestFailure("socket failed") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 && backlog.map { listen(fd, $0) == 0 } ?? true
            }
        }
        guard bound else {
            close(fd)
            throw TestFailure("cannot listen on 127.0.0.1")
        }
        descriptor = fd
        port = UInt16(bigEndian: address.sin_port)
    }

    /// A port nothing listens on now.
    static func freePort() throws -> UInt16 {
        let socket = try LoopbackSocket(listening: nil)
        close(socket.descriptor)
        return socket.port
    }
}

/// What the plain-HTTP tests send to their loopback servers: an empty array of entries, through libcurl's
/// client (which hands plain `http://` to the socket client), the outcome as a value.
func postEntries(_ client: CurlHTTPClient = CurlHTTPClient(), port: UInt16, timeoutMs: Int = 5000) async -> Result<HTTPResponse, HTTPError> {
    let request = HTTPRequest(method: "POST", url: "http://127.0.0.1:\(port)/api/v1/entries", body: Array("[]".utf8),
                              connectTimeoutMs: 2000, timeoutMs: timeoutMs)
    do { return .success(try await client.send(request)) } catch { return .failure(error) }
}
