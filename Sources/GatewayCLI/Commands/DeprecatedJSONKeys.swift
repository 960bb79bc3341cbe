import GatewayCore
import Support

/// Every command's JSON output uses snake_case keys. Earlier versions printed camelCase ones in `meters`
/// and `readings`; for one release those old keys are still written, with the same values, after the new
/// members of each object, so that a script reading them keeps working. They go away in the next minor
/// release (README, "Commands").
enum DeprecatedJSONKeys {
    /// `object` with, for every `(key, old)` pair whose `key` it has, a member `old` holding the same value,
    /// appended in the order of `aliases`. A value that is not an object is returned as it is.
    static func adding(_ aliases: KeyValuePairs<String, String>, to object: JSONValue) -> JSONValue {
        guard case .object(var members) = object else { return object }
        for (key, old) in aliases {
            if let value = object[key] { members.append(JSONMember(old, value)) }
        }
        return .object(members)
    }
}
