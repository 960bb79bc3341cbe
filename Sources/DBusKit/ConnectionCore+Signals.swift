internal import CDBus

extension ConnectionCore {
    /// A subscriber: `deliver` and `finish` run on the queue, in arrival order, and must not block.
    /// `endOfBatch`, when set, runs after the messages of one dispatch pass (all that one wake-up read)
    /// were delivered, if any were, so a subscriber can hand them on together.
    struct Subscription {
        let rules: [MatchRule]
        let deliver: @Sendable (DBusMessage) -> Void
        let finish: @Sendable () -> Void
        var endOfBatch: (@Sendable () -> Void)? = nil
        /// Evaluated on the queue before `deliver`: a message it rejects counts as not delivered.
        var filter: (@Sendable (DBusMessage) -> Bool)? = nil
        /// Asked on the queue after a pass that delivered messages to this subscription: true lets the
        /// connection wait a moment for more of the burst before ending the pass (see `BurstWait`).
        var awaitsBurst: (@Sendable () -> Bool)? = nil
    }

    /// Hands a signal to every subscription with a rule that matches it. Counts it for the pass: a burst
    /// signal when every subscription it was delivered to lets the connection wait for more
    /// (`awaitsBurst`), another message when some other subscription took it.
    func routeSignal(_ message: OpaquePointer) {
        guard !subscriptions.isEmpty else { return }
        // Headers first; the body is decoded only when some rule wants the message.
        var decoded = Marshalling.decodeHeader(message)
        var bodyDecoded = false
        var plainDelivery = false
        var burstDelivery = false
        for (key, subscription) in subscriptions {
            var wanted = false
            for rule in subscription.rules where rule.matchesHeader(decoded) {
                if rule.arguments.isEmpty {
                    wanted = true
                    break
                }
                if !bodyDecoded {
                    decoded.body = Marshalling.decodeBody(message)
                    bodyDecoded = true
                }
                if rule.matches(decoded) {
                    wanted = true
                    break
                }
            }
            guard wanted else { continue }
            if !bodyDecoded {
                decoded.body = Marshalling.decodeBody(message)
                bodyDecoded = true
            }
            if let filter = subscription.filter, !filter(decoded) { continue }
            subscription.deliver(decoded)
            if subscription.endOfBatch != nil { batched.insert(key) }
            if subscription.awaitsBurst != nil {
                burstDelivery = true
                pass.bursting.insert(key)
            } else {
                plainDelivery = true
            }
        }
        if plainDelivery { pass.others += 1 } else if burstDelivery { pass.burst += 1 }
    }

    /// Whether every subscription that was delivered a burst signal since `pass` was reset lets the
    /// connection wait for more.
    func burstWanted() -> Bool {
        for key in pass.bursting {
            guard let ask = subscriptions[key]?.awaitsBurst, ask() else { return false }
        }
        return true
    }

    /// Ends the dispatch pass for the subscriptions that were delivered a message in it.
    func endBatches() {
        guard !batched.isEmpty else { return }
        let keys = batched
        batched.removeAll(keepingCapacity: true)
        for key in keys { subscriptions[key]?.endOfBatch?() }
    }

    func addSubscription(_ key: Int, _ subscription: Subscription) -> Bool {
        guard isConnected else {
            subscription.finish()
            return false
        }
        subscriptions[key] = subscription
        return true
    }

    func removeSubscription(_ key: Int, removeMatch: Bool) {
        guard let subscription = subscriptions.removeValue(forKey: key) else { return }
        subscription.finish()
        if removeMatch && isConnected {
            // With no error argument this sends RemoveMatch without waiting for the reply.
            for rule in subscription.rules { dbus_bus_remove_match(raw, rule.description, nil) }
        }
    }

    func addDisconnectWatcher(_ key: Int, _ continuation: AsyncStream<Void>.Continuation) {
        guard isConnected else {
            continuation.yield(())
            continuation.finish()
            return
        }
        disconnectWatchers[key] = continuation
    }

    func removeDisconnectWatcher(_ key: Int) {
        disconnectWatchers.removeValue(forKey: key)
    }

    func emitSignal(path: String, interface: String, member: String, arguments: [DBusValue],
                    destination: String?) -> Result<Void, DBusError> {
        guard isConnected else { return .failure(DBusError(.disconnected, "not connected to the bus")) }
        guard Marshalling.isValidObjectPath(path) else { return .failure(DBusError(.invalidArgs, "invalid object path \"\(path)\"")) }
        guard Marshalling.isValidInterface(interface) else { return .failure(DBusError(.invalidArgs, "invalid interface name \"\(interface)\"")) }
        guard Marshalling.isValidMember(member) else { return .failure(DBusError(.invalidArgs, "invalid member name \"\(member)\"")) }
        if let destination, !Marshalling.isValidBusName(destination) {
            return .failure(DBusError(.invalidArgs, "invalid bus name \"\(destination)\""))
        }
        do { try Marshalling.validate(arguments) } catch { return .failure(error) }
        guard let message = dbus_message_new_signal(path, interface, member) else {
            return .failure(DBusError(.noMemory, "out of memory"))
        }
        defer { dbus_message_unref(message) }
        if let destination { _ = dbus_message_set_destination(message, destination) }
        guard Marshalling.append(arguments, to: message), dbus_connection_send(raw, message, nil) != 0 else {
            return .failure(DBusError(.noMemory, "out of memory"))
        }
        return .success(())
    }
}
