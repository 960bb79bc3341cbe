import Dispatch
import Testing
@testable import SQLiteStore
import SQLiteStoreTestSupport

/// `SQLiteStore.queueTarget`: a store opened while it is set runs its work on that queue.
@Suite(.timeLimit(.minutes(1))) struct QueueTargetTests {
    @Test func aStoreOpenedUnderATargetRunsOnItAndOthersDoNot() async throws {
        let key = DispatchSpecificKey<String>()
        let target = DispatchQueue(label: "test.store-target")
        target.setSpecific(key: key, value: "target")
        let dir = try TemporaryDirectory()
        defer { dir.remove() }
        let onTarget = try await SQLiteStore.$queueTarget.withValue(target) {
            let store = try SQLiteStore(path: dir.database)
            let seen = await store.queueSpecificForTesting(key)
            await store.close()
            return seen
        }
        #expect(onTarget == "target")
        let alone = try SQLiteStore(path: dir.database)
        #expect(await alone.queueSpecificForTesting(key) == nil)
        await alone.close()
    }
}
