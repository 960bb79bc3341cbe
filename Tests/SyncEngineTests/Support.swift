import GatewayCore
import SyncEngine
import TestSupport

/// An outbox of `count` synthetic readings (`TestSupport.syntheticReading`), queued for Nightscout unless told.
func filledStore(_ count: Int, builders: [any OutboxBodyBuilder] = [NightscoutBodyBuilder()]) async -> FakeOutboxStore {
    await filledOutbox(count, builders: builders)
}
