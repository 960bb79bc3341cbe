import GatewayCore

/// An in-memory `OutboxStore` with the same rules as the SQLite one: claims mark rows in flight, nothing
/// is deleted, in-flight rows go back to pending on `requeueInFlight`.
public actor FakeOutboxStore: OutboxStore {
    public private(set) var rows: [OutboxItem] = []
    public private(set) var answers: [Int64: String] = [:]
    public private(set) var acknowledgedAt: [Int64: UnixMillis] = [:]
    private var states: [DestinationName: DestinationState] = [:]
    private var nextID: Int64 = 1
    private var nextReading: Int64 = 1
    /// How many rows each claim returned, for tests of batch sizes.
    public private(set) var claims: [Int] = []

    public init() {}

    /// What the real store does inside the transaction that inserts a reading: one row per builder that
    /// accepts it, with the bytes frozen now.
    @discardableResult
    public func enqueue(_ reading: NewReading, meter: MeterInfo, builders: [any OutboxBodyBuilder], createdAt: UnixMillis = 0) -> Int {
        let readingID = nextReading
        nextReading += 1
        var added = 0
        for builder in builders {
            guard let element = builder.element(for: reading, meter: meter) else { continue }
            rows.append(OutboxItem(id: nextID, destination: builder.destination, readingID: readingID, key: element.key,
                                   body: element.body, state: .pending, attempts: 0, createdAt: createdAt))
            nextID += 1
            added += 1
        }
        return added
    }

    public func claimPending(_ destination: DestinationName, limit: Int) async throws -> [OutboxItem] {
        var out: [OutboxItem] = []
        for i in rows.indices where rows[i].destination == destination && rows[i].state == .pending {
            guard out.count < limit else { break }
            rows[i].state = .inFlight
            out.append(rows[i])
        }
        claims.append(out.count)
        return out
    }

    /// Acknowledged rows whose commit has not yet been followed by a synced one (`acknowledge` with
    /// `synced` false, then `saveDestinationState`): a power cut now could lose their acknowledgement.
    public private(set) var acknowledgedUnsynced: Set<Int64> = []

    public func acknowledge(_ ids: [Int64], at: UnixMillis, synced: Bool) async throws {
        if synced { acknowledgedUnsynced.removeAll() } else { acknowledgedUnsynced.formUnion(ids) }
        for i in rows.indices where ids.contains(rows[i].id) {
            rows[i].state = .acknowledged
            acknowledgedAt[rows[i].id] = at
        }
    }

    public func release(_ ids: [Int64]) async throws {
        for i in rows.indices where ids.contains(rows[i].id) && rows[i].state == .inFlight {
            rows[i].state = .pending
            rows[i].attempts += 1
        }
    }

    public func quarantine(_ id: Int64, answer: String) async throws {
        for i in rows.indices where rows[i].id == id {
            rows[i].state = .quarantined
            answers[id] = answer
        }
    }

    public func redrive(_ destination: DestinationName) async throws -> Int {
        var n = 0
        for i in rows.indices where rows[i].destination == destination && rows[i].state == .quarantined {
            rows[i].state = .pending
            n += 1
        }
        return n
    }

    public func requeueInFlight() async throws -> Int {
        var n = 0
        for i in rows.indices where rows[i].state == .inFlight {
            rows[i].state = .pending
            n += 1
        }
        return n
    }

    public func unsentCounts(_ destination: DestinationName) async throws -> OutboxCounts {
        var c = try await counts(destination)
        c.acknowledged = 0
        return c
    }

    public func counts(_ destination: DestinationName) async throws -> OutboxCounts {
        var c = OutboxCounts()
        for row in rows where row.destination == destination {
            switch row.state {
            case .pending: c.pending += 1
            case .inFlight: c.inFlight += 1
            case .acknowledged: c.acknowledged += 1
            case .quarantined: c.quarantined += 1
            }
            if row.state == .pending || row.state == .inFlight {
                c.oldestUnsent = min(c.oldestUnsent ?? row.createdAt, row.createdAt)
            }
        }
        return c
    }

    /// How many times a destination state was saved.
    public private(set) var stateSaves = 0

    public func saveDestinationState(_ state: DestinationState) async throws {
        stateSaves += 1
        acknowledgedUnsynced.removeAll()
        states[state.destination] = state
    }

    public func destinationState(_ destination: DestinationName) async throws -> DestinationState? {
        states[destination]
    }

    public func state(of id: Int64) -> OutboxState? { rows.first { $0.id == id }?.state }
}
