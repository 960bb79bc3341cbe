import Dispatch
import GatewayCore
import SQLiteStore
import Support
import Testing
@testable import GatewayCLI
import SQLiteStoreTestSupport

/// `OneQueue`: a command's tasks, child tasks and store all run on its one queue.
@Suite(.timeLimit(.minutes(1))) struct OneQueueTests {
    static let key = DispatchSpecificKey<String>()

    static func whereAmI() -> String { DispatchQueue.getSpecific(key: key) ?? "elsewhere" }

    @Test func tasksChildTasksAndTheStoreRunOnTheOneQueue() async throws {
        let one = OneQueue()
        one.queue.setSpecific(key: Self.key, value: "one")
        let seen = try await one.run {
            var seen = [Self.whereAmI()]
            await Task.yield()
            seen.append(Self.whereAmI())
            async let child = Self.whereAmI()
            seen.append(await child)
            let store = try SQLiteStore(path: ":memory:")
            seen.append(await store.queueSpecificForTesting(Self.key) ?? "elsewhere")
            seen.append(Self.whereAmI())
            await store.close()
            // A task started with the command's preferred executor keeps to the queue too.
            seen.append(await Task(executorPreference: CommandExecutor.preferred) { Self.whereAmI() }.value)
            return seen
        }
        #expect(seen == ["one", "one", "one", "one", "one", "one"])
        // Outside `run`, nothing is on it.
        #expect(Self.whereAmI() == "elsewhere")
        #expect(CommandExecutor.preferred == nil)
        let store = try SQLiteStore(path: ":memory:")
        #expect(await store.queueSpecificForTesting(Self.key) == nil)
        await store.close()
    }

    /// The daemon and the commands that run test doubles beside it keep their parts concurrent.
    @Test func onlyTheDaemonAndTheDoublesRunConcurrently() {
        #expect(allCommands.filter { $0.runsConcurrently }.map { $0.name }.sorted() == ["demo", "run"])
    }
}
