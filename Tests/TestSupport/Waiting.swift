import Synchronization

/// Waiting in tests: on an event or a condition, always with a generous deadline so that a test fails
/// instead of hanging. None of these decides an outcome by how much time has passed; a deadline only
/// turns "never happened" into a failure.

/// A step that did not finish within its deadline.
public struct TimeoutError: Error, CustomStringConvertible {
    public var seconds: Double
    public var description: String { "test step timed out after \(seconds) s" }
}

/// Runs `body`; throws ``TimeoutError`` (and cancels `body`) when it takes longer than `seconds` of real time.
public func withTimeout<T: Sendable>(_ seconds: Double, _ body: @escaping @Sendable () async throws -> T) async throws -> T {
    try await withThrowingTaskGroup(of: T?.self) { group in
        group.addTask { try await body() }
        group.addTask {
            try await Task.sleep(for: .milliseconds(Int64(seconds * 1000)))
            return nil
        }
        defer { group.cancelAll() }
        guard let first = try await group.next(), let value = first else {
            throw TimeoutError(seconds: seconds)
        }
        return value
    }
}

/// Checks `condition` every 10 ms until it holds (true) or `seconds` of real time have passed (the last check's
/// result). For a state that has no event of its own to wait on.
public func waitUntil(_ seconds: Double, _ condition: () async -> Bool) async -> Bool {
    let end = ContinuousClock.now + .milliseconds(Int64(seconds * 1000))
    while ContinuousClock.now < end {
        if await condition() { return true }
        do { try await Task.sleep(for: .milliseconds(10)) } catch { break }
    }
    return await condition()
}

/// A one-shot event: ``wait()`` returns once ``signal()`` has been called (at once if it already was), or throws
/// `CancellationError` when the waiting task is cancelled first. For "this has happened" between a test
/// and a handler it gave to the code under test, in place of a pause that hopes it has.
public final class TestEvent: Sendable {
    private struct State {
        var signalled = false
        var waiters: [Int: CheckedContinuation<Void, any Error>] = [:]
        var nextKey = 0
    }
    private let state = Mutex(State())

    public init() {}

    public var isSignalled: Bool { state.withLock { $0.signalled } }

    public func signal() {
        let waiters = state.withLock { s -> [CheckedContinuation<Void, any Error>] in
            s.signalled = true
            defer { s.waiters = [:] }
            return Array(s.waiters.values)
        }
        for waiter in waiters { waiter.resume() }
    }

    public func wait() async throws {
        let key = state.withLock { s -> Int in
            s.nextKey += 1
            return s.nextKey
        }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
                let resumeNow = state.withLock { s -> (any Error)?? in
                    if s.signalled { return .some(nil) }
                    if Task.isCancelled { return .some(CancellationError()) }
                    s.waiters[key] = continuation
                    return nil
                }
                switch resumeNow {
                case .some(.some(let error)): continuation.resume(throwing: error)
                case .some(.none): continuation.resume()
                case .none: break
                }
            }
        } onCancel: {
            let waiter = state.withLock { $0.waiters.removeValue(forKey: key) }
            waiter?.resume(throwing: CancellationError())
        }
    }
}
