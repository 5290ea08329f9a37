/// HTTP dates in the preferred form of RFC 9110 §5.6.7 (IMF-fixdate:
/// `Sun, 06 Nov 1994 08:49:37 GMT`), as seconds since 1970. The two obsolete forms are not
/// read: a date that cannot be read makes no validator, which only costs a cache entry.
enum HTTPDate {
    private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

    static func seconds(_ text: String) -> Int64? {
        let parts = text.split(separator: " ", omittingEmptySubsequences: false)
        guard parts.count == 6, parts[0].count == 4, parts[0].hasSuffix(","), parts[5] == "GMT",
              parts[1].count == 2, let day = Int(parts[1]), (1...31).contains(day),
              let monthIndex = months.firstIndex(of: String(parts[2])),
              parts[3].count == 4, let year = Int(parts[3]), year >= 1970
        else { return nil }
        let clock = parts[4].split(separator: ":", omittingEmptySubsequences: false)
        guard clock.count == 3, clock.allSatisfy({ $0.count == 2 }),
              let hour = Int(clock[0]), let minute = Int(clock[1]), let second = Int(clock[2]),
              hour < 24, minute < 60, second <= 60
        else { return nil }
        return (days(year: year, month: monthIndex + 1, day: day) * 86_400 + Int64(hour * 3600 + minute * 60 + second))
    }

    /// Days from 1970-01-01 to the date (proleptic Gregorian calendar).
    static func days(year: Int, month: Int, day: Int) -> Int64 {
        // Counted from March, so that the leap day ends the year.
        let y = Int64(month <= 2 ? year - 1 : year)
        let era = y / 400
        let yearOfEra = y - era * 400
        let m = Int64(month)
        let dayOfYear = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + Int64(day) - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }
}
