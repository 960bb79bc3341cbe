import GatewayCore
import Synchronization

/// The session a capture records, on a connected link: what the meter says of itself (Device
/// Information), its features, its clock, then a report of every stored record (RACP `01 01`), every
/// value as it arrives. It changes nothing on the meter a sync does not: it writes no clock and deletes
/// no record, and it reports all records rather than those after the last stored one, so the capture
/// holds the meter's whole memory whatever the database holds (it opens no database).
public enum CaptureSession {
    /// The characteristics read, in order; each only when the meter has it.
    public static let reads: [GATTUUID] = [
        .manufacturerName, .modelNumber, .serialNumber, .firmwareRevision, .softwareRevision, .systemID,
        .glucoseFeature, .currentTime, .dateTime,
    ]

    /// Runs the session and returns its events. `idleTimeout`: how long the report may go without a value
    /// before the capture ends without the meter's answer (that, too, goes into the capture).
    public static func run(on link: any MeterLink, idleTimeout: Duration = .seconds(15)) async -> [CaptureEvent] {
        let log = EventLog()
        let consumer = Task {
            for await event in link.events {
                switch event {
                case let .value(uuid, bytes):
                    log.append(.value, uuid: uuid, value: bytes)
                    if uuid == .recordAccessControlPoint, bytes.first == 0x06 { log.finish() }
                case let .disconnected(reason):
                    log.append(.disconnected, error: reason)
                    log.finish(linkEnded: true)
                    return
                }
            }
        }
        for uuid in reads where await link.hasCharacteristic(uuid) {
            do {
                let value = try await link.read(uuid)
                if Capture.identifyingCharacteristics.contains(uuid) {
                    log.append(.read, uuid: uuid, withheld: true)
                } else {
                    log.append(.read, uuid: uuid, value: value)
                }
            } catch {
                log.append(.read, uuid: uuid, error: describe(error))
            }
        }
        var subscribed: [GATTUUID] = []
        for uuid in [GATTUUID.glucoseMeasurement, .glucoseMeasurementContext, .recordAccessControlPoint] where await link.hasCharacteristic(uuid) {
            do {
                try await link.subscribe(uuid)
                log.append(.subscribe, uuid: uuid)
                subscribed.append(uuid)
            } catch {
                log.append(.subscribe, uuid: uuid, error: describe(error))
            }
        }
        let request: [UInt8] = [0x01, 0x01]
        var answered = false
        do {
            try await link.write(.recordAccessControlPoint, request)
            log.append(.write, uuid: .recordAccessControlPoint, value: request)
            answered = true
        } catch {
            log.append(.write, uuid: .recordAccessControlPoint, value: request, error: describe(error))
        }
        if answered {
            // Until the RACP answer or the link's end, or `idleTimeout` without a value.
            while !log.isFinished, log.idle < idleTimeout {
                try? await Task.sleep(for: .milliseconds(50))
            }
        }
        // The session's own end: no value after it is kept.
        consumer.cancel()
        if !log.linkEnded {
            await link.unsubscribe(subscribed)
            await link.disconnect()
            log.append(.disconnected)
        }
        return log.events
    }

    /// An error as the gateway names it, with the ATT code when the meter gave one.
    static func describe(_ error: MeterLinkError) -> String {
        let kind: String = switch error.kind {
        case .transient: "transient"
        case .permanent: "permanent"
        case .disconnected: "disconnected"
        case .timeout: "timeout"
        case .notSupported: "not supported"
        case .bondLost: "bond lost"
        }
        guard let att = error.attError else { return kind }
        let hex = String(att, radix: 16)
        return kind + " (ATT error 0x" + (hex.count < 2 ? "0" : "") + hex + ")"
    }
}

/// The events of a session in the order they happen, from the session and from the link's event
/// stream at once.
final class EventLog: Sendable {
    private struct State {
        var events: [CaptureEvent] = []
        var finished = false
        var linkEnded = false
        var last: ContinuousClock.Instant
    }
    private let start = ContinuousClock.now
    private let state: Mutex<State>

    init() { state = Mutex(State(last: start)) }

    func append(_ kind: CaptureEvent.Kind, uuid: GATTUUID? = nil, value: [UInt8]? = nil, error: String? = nil, withheld: Bool = false) {
        let now = ContinuousClock.now
        let elapsed = now - start
        let ms = elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000
        state.withLock {
            // Never backwards, whichever task appended first.
            let at = max(ms, $0.events.last?.milliseconds ?? 0)
            $0.events.append(CaptureEvent(milliseconds: at, kind: kind, uuid: uuid, value: value, error: error, withheld: withheld))
            $0.last = now
        }
    }

    func finish(linkEnded: Bool = false) {
        state.withLock {
            $0.finished = true
            if linkEnded { $0.linkEnded = true }
        }
    }
    var isFinished: Bool { state.withLock { $0.finished } }
    var linkEnded: Bool { state.withLock { $0.linkEnded } }
    var idle: Duration { ContinuousClock.now - state.withLock { $0.last } }
    var events: [CaptureEvent] { state.withLock { $0.events } }
}
