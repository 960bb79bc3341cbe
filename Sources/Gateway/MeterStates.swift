import GatewayCore
import SQLiteStore

/// One paired meter as the services that show meters read it (Nightscout's device status, the MQTT
/// states): its row and its newest readings, newest first.
struct MeterState: Sendable {
    var info: MeterInfo
    var newestFirst: [NewReading]
}

/// Reads every paired meter with its newest `limit` readings. The services take it as a function, so that
/// a test can see when, and how often, they read the store.
typealias MeterStateReader = @Sendable (_ limit: Int) async throws -> [MeterState]

extension SQLiteStore {
    /// Every paired meter with its newest `limit` readings, newest first.
    func meterStates(limit: Int) throws -> [MeterState] {
        try meters().map { record in
            MeterState(info: record.info, newestFirst: try newestReadings(meterAddress: record.info.address, limit: limit).map(\.reading))
        }
    }
}
