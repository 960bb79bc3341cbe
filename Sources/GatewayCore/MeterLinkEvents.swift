import Synchronization

extension MeterLink {
    /// Single events in groups of one, read from `events` in the consumer's own task (no task in between,
    /// so the timing is that of `events`).
    public var eventGroups: AsyncStream<[MeterLinkEvent]> {
        let reader = EventReader(events.makeAsyncIterator())
        return AsyncStream(unfolding: { await reader.next().map { [$0] } })
    }
}

/// The iterator of a stream, called only by the one task that consumes `eventGroups`.
private final class EventReader: @unchecked Sendable {
    private var iterator: AsyncStream<MeterLinkEvent>.Iterator
    init(_ iterator: AsyncStream<MeterLinkEvent>.Iterator) { self.iterator = iterator }
    func next() async -> MeterLinkEvent? { await iterator.next() }
}

/// The events of one link, offered both ways: `events` one at a time, `eventGroups` in the groups they
/// were handed in. A link has one consumer, which reads one of the two: the first that is asked for
/// gets everything handed in from the start, the other ends at once. Groups keep their order and the
/// order inside them; nothing follows `.disconnected`.
public final class MeterLinkEventChannel: Sendable {
    private enum Mode { case undecided, single, grouped }
    private struct State {
        var mode = Mode.undecided
        /// What was handed in before a consumer chose, and whether the channel was finished meanwhile.
        var held: [[MeterLinkEvent]] = []
        var finished = false
    }
    private let state = Mutex(State())
    private let singles: AsyncStream<MeterLinkEvent>
    private let singlesInput: AsyncStream<MeterLinkEvent>.Continuation
    private let groups: AsyncStream<[MeterLinkEvent]>
    private let groupsInput: AsyncStream<[MeterLinkEvent]>.Continuation

    public init() {
        (singles, singlesInput) = AsyncStream.makeStream(of: MeterLinkEvent.self, bufferingPolicy: .unbounded)
        (groups, groupsInput) = AsyncStream.makeStream(of: [MeterLinkEvent].self, bufferingPolicy: .unbounded)
    }

    public var events: AsyncStream<MeterLinkEvent> {
        choose(.single)
        return singles
    }

    public var eventGroups: AsyncStream<[MeterLinkEvent]> {
        choose(.grouped)
        return groups
    }

    private func choose(_ mode: Mode) {
        state.withLock { state in
            guard state.mode == .undecided else { return }
            state.mode = mode
            for group in state.held { deliver(group, mode) }
            state.held = []
            if mode == .single { groupsInput.finish() } else { singlesInput.finish() }
            if state.finished { finish(mode) }
        }
    }

    private func deliver(_ group: [MeterLinkEvent], _ mode: Mode) {
        switch mode {
        case .single: for event in group { singlesInput.yield(event) }
        case .grouped: groupsInput.yield(group)
        case .undecided: break
        }
    }

    private func finish(_ mode: Mode) {
        switch mode {
        case .single: singlesInput.finish()
        case .grouped: groupsInput.finish()
        case .undecided: break
        }
    }

    /// Hands on `group` (nothing when empty), after everything handed in before.
    public func yield(_ group: [MeterLinkEvent]) {
        guard !group.isEmpty else { return }
        state.withLock { state in
            guard !state.finished else { return }
            if state.mode == .undecided { state.held.append(group) } else { deliver(group, state.mode) }
        }
    }

    /// Hands on `group`, then ends the events; later groups are dropped.
    public func finish(after group: [MeterLinkEvent] = []) {
        state.withLock { state in
            guard !state.finished else { return }
            state.finished = true
            if state.mode == .undecided {
                if !group.isEmpty { state.held.append(group) }
                return
            }
            if !group.isEmpty { deliver(group, state.mode) }
            finish(state.mode)
        }
    }
}
