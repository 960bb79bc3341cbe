import GatewayCore
import GlucoseProfile
import Support

/// A meter link the daemon can end on its own: on SIGTERM it sends RACP Abort Operation, then ends the
/// event stream with `.disconnected`, so the download commits what it has, unsubscribes and disconnects
/// through its ordinary path (cancelling the task instead would abandon those bus calls).
public final class StoppableLink: MeterLink, Sendable {
    public let base: any MeterLink
    private let channel = MeterLinkEventChannel()
    private let forwarder: Task<Void, Never>

    public init(_ base: any MeterLink) {
        self.base = base
        let channel = self.channel
        // The base's groups pass through whole: one stream element per group on each side.
        let upstream = base.eventGroups
        forwarder = Task {
            for await group in upstream {
                if let end = group.firstIndex(where: { if case .disconnected = $0 { true } else { false } }) {
                    channel.finish(after: Array(group[...end]))
                    return
                }
                channel.yield(group)
            }
            channel.finish()
        }
    }

    public var events: AsyncStream<MeterLinkEvent> { channel.events }
    public var eventGroups: AsyncStream<[MeterLinkEvent]> { channel.eventGroups }

    deinit { forwarder.cancel() }

    public var address: String { base.address }
    public func hasCharacteristic(_ uuid: GATTUUID) async -> Bool { await base.hasCharacteristic(uuid) }
    public func read(_ uuid: GATTUUID) async throws(MeterLinkError) -> [UInt8] { try await base.read(uuid) }
    public func write(_ uuid: GATTUUID, _ value: [UInt8]) async throws(MeterLinkError) { try await base.write(uuid, value) }
    public func subscribe(_ uuid: GATTUUID) async throws(MeterLinkError) { try await base.subscribe(uuid) }
    public func unsubscribe(_ uuid: GATTUUID) async { await base.unsubscribe(uuid) }
    public func read(_ uuids: [GATTUUID]) async -> [Result<[UInt8], MeterLinkError>] { await base.read(uuids) }
    public func subscribe(_ uuids: [GATTUUID]) async -> [Result<Void, MeterLinkError>] { await base.subscribe(uuids) }
    public func unsubscribe(_ uuids: [GATTUUID]) async { await base.unsubscribe(uuids) }
    public func disconnect() async {
        forwarder.cancel()
        await base.disconnect()
        channel.finish()
    }

    /// Sends RACP Abort Operation, waiting at most `timeout` on `clock` for the write to be acknowledged.
    public func abortProcedure(timeout: Duration, clock: any SessionClock) async {
        let base = self.base
        await withTaskGroup(of: Void.self) { group in
            group.addTask { try? await base.write(.recordAccessControlPoint, RACPRequest.abort.encoded()) }
            group.addTask { try? await clock.sleep(for: timeout) }
            _ = await group.next()
            group.cancelAll()
        }
    }

    /// Ends the session as if the link had dropped.
    public func end(reason: String) {
        channel.finish(after: [.disconnected(reason: reason)])
    }
}
