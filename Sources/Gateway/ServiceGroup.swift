/// A long-running part of the application, in the shape of swift-service-lifecycle's `Service`: `run()`
/// returns when the task running it is cancelled, or earlier when its input has ended (a service fed by
/// daemon snapshots ends with their stream, after the last one).
public protocol Service: Sendable {
    func run() async
}

/// Runs services beside a main body (the daemon), each in a child task of its own, and stops them when the
/// body returns: one at a time in the reverse order of their start, each awaited before the one started
/// before it is cancelled. So a service never outlives one started after it (the state file is still written
/// while the heartbeat and MQTT stop), and nothing is left to tear down by hand.
///
/// Structured: the group is nested task groups, one per service, so everything it started has ended when
/// `run` returns. When the task running the group is cancelled, Swift cancels every child at once; the
/// body is expected to return then (the daemon stops on a signal, not on cancellation).
public struct ServiceGroup: Sendable {
    public var services: [any Service]

    public init(_ services: [any Service]) {
        self.services = services
    }

    /// Starts the services in order, runs `body`, then stops the services in reverse order; returns what
    /// `body` returned.
    public func run<Result: Sendable>(_ body: () async -> Result) async -> Result {
        await Self.run(services[...], body)
    }

    private static func run<Result: Sendable>(_ services: ArraySlice<any Service>, _ body: () async -> Result) async -> Result {
        guard let first = services.first else { return await body() }
        return await withTaskGroup(of: Void.self, returning: Result.self) { group in
            group.addTask { await first.run() }
            // The services started after `first`, and the body, end before `first` is cancelled.
            let result = await run(services.dropFirst(), body)
            group.cancelAll()
            await group.waitForAll()
            return result
        }
    }
}
