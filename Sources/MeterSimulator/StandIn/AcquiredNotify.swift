import Dispatch
#if canImport(Glibc)
import Glibc
#endif

/// The socket pair behind one `AcquireNotify`: one notification per packet (SOCK_SEQPACKET), as bluetoothd
/// does. Our end stays here; the peer's end is handed to the client in the reply (libdbus duplicates it when
/// the reply is built) and our copy of it is closed a moment later. Hang-up on our end means the client
/// closed its descriptor.
final class AcquiredNotify {
    let descriptor: Int32
    private(set) var peerDescriptor: Int32
    /// The bus name of the client that acquired it: bluetoothd releases the socket when that client
    /// leaves the bus, as it ends a `StartNotify` session.
    let owner: String
    private var source: (any DispatchSourceRead)?

    private init(descriptor: Int32, peer: Int32, owner: String) {
        self.descriptor = descriptor
        self.peerDescriptor = peer
        self.owner = owner
    }

    struct OpenError: Error, CustomStringConvertible {
        var description: String
    }

    /// `onHangUp` runs (on a global queue) when the client closes its end.
    static func open(owner: String, onHangUp: @escaping @Sendable () -> Void) throws -> AcquiredNotify {
        var fds: [Int32] = [-1, -1]
        let kind = Int32(SOCK_SEQPACKET.rawValue) | Int32(SOCK_CLOEXEC.rawValue)
        guard socketpair(AF_UNIX, kind, 0, &fds) == 0 else {
            throw bluezError("Failed", "socketpair failed: errno \(errno)")
        }
        let session = AcquiredNotify(descriptor: fds[0], peer: fds[1], owner: owner)
        let source = DispatchSource.makeReadSource(fileDescriptor: fds[0], queue: .global())
        let fd = fds[0]
        source.setEventHandler {
            var byte: UInt8 = 0
            let n = recv(fd, &byte, 1, Int32(MSG_DONTWAIT))
            if n == 0 { onHangUp() }
        }
        source.resume()
        session.source = source
        // Give libdbus time to duplicate the peer's end into the reply, then drop our copy of it so the
        // client's close() is seen here as a hang-up.
        let peer = fds[1]
        DispatchQueue.global().asyncAfter(deadline: .now() + 1) { _ = Glibc.close(peer) }
        return session
    }

    enum SendOutcome { case sent, full, gone }

    /// Sends one notification without waiting, as bluetoothd does (`notify_io_cb` in `src/gatt-client.c`):
    /// a socket the client has not read enough of is `full` and the value is lost; `gone` when the
    /// client closed its end.
    func send(_ bytes: [UInt8]) -> SendOutcome {
        let sent = bytes.withUnsafeBytes { raw in
            Glibc.send(descriptor, raw.baseAddress, raw.count, Int32(MSG_NOSIGNAL | MSG_DONTWAIT))
        }
        if sent == bytes.count { return .sent }
        return sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) ? .full : .gone
    }

    func close() {
        source?.cancel()
        source = nil
        _ = Glibc.close(descriptor)
    }
}
