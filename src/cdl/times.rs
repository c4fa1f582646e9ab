//! Time values as `ncdump -t` prints them: a variable whose `units` read `<unit> since <date>`
//! gets its values printed as dates (`"2000-01-15 06:30"`), in the calendar its `calendar`
//! attribute names.
//!
//! ncdump does this with LLNL's cdtime library, and its output is cdtime's arithmetic; this
//! module follows the same arithmetic so that the text is the same:
//! - times are hours counted from 1970 in the chosen calendar; `month`, `season` and `year`
//!   units count whole months from the base date, landing on the first of the month;
//! - `standard` / `gregorian` (the default) is Julian before 1582-10-15 and Gregorian from
//!   then on, joined as cdtime joins them (Julian 1582-10-05 is the last Julian day);
//! - a date prints its time only as far as it is not zero (`2000-01-15`, `… 06`, `… 06:30`,
//!   `… 06:30:15`), fractional seconds with six decimals, years with at least four digits.
//!
//! Two differences, both where ncdump goes wrong:
//! - the calendar `none`, in any case (cdtime's climatological calendar, which reads the
//!   base date as month and day, reports errors and prints dates without years) is not a
//!   time here: its values print as numbers;
//! - ncdump prints the variables that a `bounds` attribute names as dates only for the last
//!   such attribute it printed (it empties its list at each insertion); here every one is.

/// Calendars, as the `calendar` attribute names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Calendar {
    /// Julian before 1582-10-15, Gregorian after (`standard`, `gregorian`, the default).
    Mixed,
    /// Gregorian everywhere (`proleptic_gregorian`).
    Gregorian,
    /// Every fourth year a leap year (`julian`).
    Julian,
    /// 365 days every year (`noleap`, `365_day`).
    NoLeap,
    /// 366 days every year (`all_leap`, `366_day`).
    AllLeap,
    /// Twelve months of 30 days (`360_day`).
    Day360,
}

impl Calendar {
    /// The calendar an attribute's text names, as ncdump matches it (`strncasecmp`): the
    /// text is compared with each known name over the text's length only, in any case, the
    /// first match wins, and what matches nothing is the default. `None` for `none`, which
    /// is not handled here.
    fn from_attribute(text: Option<&str>) -> Option<Calendar> {
        let names = [
            ("gregorian", Some(Calendar::Mixed)),
            ("standard", Some(Calendar::Mixed)),
            ("proleptic_gregorian", Some(Calendar::Gregorian)),
            ("noleap", Some(Calendar::NoLeap)),
            ("no_leap", Some(Calendar::NoLeap)),
            ("365_day", Some(Calendar::NoLeap)),
            ("allleap", Some(Calendar::AllLeap)),
            ("all_leap", Some(Calendar::AllLeap)),
            ("366_day", Some(Calendar::AllLeap)),
            ("360_day", Some(Calendar::Day360)),
            ("julian", Some(Calendar::Julian)),
            ("none", None),
        ];
        let Some(text) = text.filter(|t| !t.is_empty()) else {
            return Some(Calendar::Mixed);
        };
        let text = text.to_ascii_lowercase();
        names
            .iter()
            .find(|(name, _)| name.starts_with(&text))
            .map_or(Some(Calendar::Mixed), |(_, cal)| *cal)
    }

    fn is_leap(self, year: i64) -> bool {
        match self {
            Calendar::AllLeap => true,
            Calendar::NoLeap | Calendar::Day360 => false,
            Calendar::Julian => year % 4 == 0,
            Calendar::Gregorian | Calendar::Mixed => {
                year % 4 == 0 && (year % 100 != 0 || year % 400 == 0)
            }
        }
    }

    fn days_in_year(self, year: i64) -> i64 {
        match self {
            Calendar::Day360 => 360,
            Calendar::AllLeap => 366,
            _ if self.is_leap(year) => 366,
            _ => 365,
        }
    }

    /// Consecutive years that always hold the same number of days, and that number.
    fn cycle(self) -> (i64, i64) {
        match self {
            Calendar::Gregorian | Calendar::Mixed => (400, 146_097),
            Calendar::Julian => (4, 1461),
            c => (1, c.days_in_year(0)),
        }
    }

    fn month_lengths(self, year: i64) -> [i64; 12] {
        if self == Calendar::Day360 {
            return [30; 12];
        }
        let feb = if self.is_leap(year) { 29 } else { 28 };
        [31, feb, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
    }
}

/// A date and a fraction of a day in hours, as cdtime holds them.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Comp {
    year: i64,
    month: i64,
    day: i64,
    hour: f64,
}

impl Comp {
    fn before(&self, other: &Comp) -> bool {
        (self.year, self.month, self.day)
            .cmp(&(other.year, other.month, other.day))
            .then(self.hour.total_cmp(&other.hour))
            .is_lt()
    }
}

/// The units of a time: `month`, `season` and `year` count whole months, the others hours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Season,
    Year,
}

impl Unit {
    /// A value in hours, computed as cdtime computes it (the same rounding).
    fn hours(self, value: f64) -> f64 {
        match self {
            Unit::Second => value / 3600.0,
            Unit::Minute => value / 60.0,
            Unit::Hour => value,
            Unit::Day => 24.0 * value,
            Unit::Week => 168.0 * value,
            Unit::Month | Unit::Season | Unit::Year => f64::NAN,
        }
    }

    /// Months per unit, for the units that count months.
    fn months(self) -> Option<f64> {
        match self {
            Unit::Month => Some(1.0),
            Unit::Season => Some(3.0),
            Unit::Year => Some(12.0),
            _ => None,
        }
    }
}

/// A variable's time units, ready to turn its values into dates.
#[derive(Debug, Clone, PartialEq)]
pub struct TimeUnits {
    calendar: Calendar,
    unit: Unit,
    base: Comp,
}

/// Hours before which cdtime's loops over years are cut short here: far enough for any
/// date with a year of i64 range, and a guard against values that would take ncdump ages.
const MAX_HOURS: f64 = 1e17;

impl TimeUnits {
    /// The time units of a variable with these `units` and `calendar` attributes, or `None`
    /// when ncdump would not print its values as dates.
    pub fn parse(units: &str, calendar: Option<&str>) -> Option<TimeUnits> {
        let (unit_word, base_text) = split_units(units)?;
        let unit = unit_of(&unit_word.to_ascii_lowercase())?;
        let calendar = Calendar::from_attribute(calendar)?;
        Some(TimeUnits {
            calendar,
            unit,
            base: parse_date(&base_text),
        })
    }

    /// A value as ncdump prints it with `-t`: the date in quotes, `sep` between date and time
    /// (`' '`, or `'T'` for `-i`), or `NaN`, `Infinity`, `-Infinity`. `None` beyond every
    /// year cdtime could reach, where the caller prints the value as plain `dump` does (the
    /// value as a double would not be the stored number: int64 -2^63 + 1 is -2^63).
    pub fn format(&self, value: f64, sep: char) -> Option<String> {
        if value.is_nan() {
            return Some("NaN".into());
        }
        if value.is_infinite() {
            return Some(if value < 0.0 { "-Infinity" } else { "Infinity" }.into());
        }
        self.to_comp(value).map(|c| format!("\"{}\"", iso(&c, sep)))
    }

    fn to_comp(&self, value: f64) -> Option<Comp> {
        let months = self.unit.months();
        if self.calendar == Calendar::Mixed && months.is_none() {
            return add_mixed(self.base, self.unit.hours(value));
        }
        let cal = match self.calendar {
            Calendar::Mixed => Calendar::Gregorian,
            c => c,
        };
        let base_hours = to_hours(&self.base, cal)?;
        match months {
            None => from_hours(base_hours + self.unit.hours(value), cal),
            Some(_) if value == 0.0 => Some(self.base),
            Some(per) => {
                let nudge = if value < 0.0 { -1e-10 } else { 1e-10 };
                add_months(base_hours, (per * value + nudge) as i64, cal)
            }
        }
    }
}

/// The unit word and the base date of `<unit> since <base>`, as cdtime's `cdParseRelunits`
/// reads them: the base is the word after `since` and the one after that, if any (`"2000-01-01
/// 12:00"`); a first word holding ISO 8601's `T` is read up to the `T` instead, the time being
/// what follows the `T` (`"2000-01-01T12:00Z"` is `"2000-01-01 12:00Z"`; nothing before the `T`
/// is the default base, 1979). `None` without a base.
fn split_units(units: &str) -> Option<(&str, String)> {
    let unit_word = units.split_ascii_whitespace().next()?;
    // `since` must stand as a word after the unit; blanks after it are optional (C's
    // `sscanf(units, "%s since %s %s", ...)`).
    let rest = units.trim_start().strip_prefix(unit_word)?.trim_start();
    let after = rest.strip_prefix("since")?.trim_start();
    let mut words = after.split_ascii_whitespace();
    let first = words.next()?;
    let base = match first.find('T') {
        // cdtime's second reading, `"%s since %[^T]T%s"`: `%[^T]` must read something.
        Some(0) => "1979".to_string(),
        Some(t) => match after[t + 1..].split_ascii_whitespace().next() {
            Some(time) => format!("{} {time}", &first[..t]),
            None => first[..t].to_string(),
        },
        None => match words.next() {
            Some(second) => format!("{first} {second}"),
            None => first.to_string(),
        },
    };
    Some((unit_word, base))
}

/// cdtime's unit words, in lower case: a prefix or an abbreviation, tried in this order.
fn unit_of(word: &str) -> Option<Unit> {
    Some(if word.starts_with("sec") || word == "s" {
        Unit::Second
    } else if word.starts_with("min") || word == "mn" {
        Unit::Minute
    } else if word.starts_with("hour") || word == "hr" {
        Unit::Hour
    } else if word.starts_with("day") || word == "dy" {
        Unit::Day
    } else if word.starts_with("week") || word == "wk" {
        Unit::Week
    } else if word.starts_with("month") || word == "mo" {
        Unit::Month
    } else if word.starts_with("season") {
        Unit::Season
    } else if word.starts_with("year") || word == "yr" {
        Unit::Year
    } else {
        return None;
    })
}

/// The base date: `Y-M-D h:m:s`, as far as it goes (C's `sscanf` with
/// `"%ld-%hd-%hd %d:%d:%lf"`), out-of-range times ending the reading as cdtime does.
fn parse_date(text: &str) -> Comp {
    let mut c = Comp {
        year: 0,
        month: 1,
        day: 1,
        hour: 0.0,
    };
    let mut s = text.trim_start();
    let Some((year, rest)) = scan_int(s) else {
        return c;
    };
    c.year = year;
    s = rest;
    let Some((month, rest)) = s.strip_prefix('-').and_then(|r| scan_int(r.trim_start())) else {
        return c;
    };
    c.month = month;
    s = rest;
    let Some((day, rest)) = s.strip_prefix('-').and_then(|r| scan_int(r.trim_start())) else {
        return c;
    };
    c.day = day;
    s = rest.trim_start();
    let Some((hour, rest)) = scan_int(s) else {
        return c;
    };
    if !(0..=23).contains(&hour) {
        return c;
    }
    c.hour = hour as f64;
    s = rest;
    let Some((minute, rest)) = s.strip_prefix(':').and_then(|r| scan_int(r.trim_start())) else {
        return c;
    };
    if !(0..=59).contains(&minute) {
        return c;
    }
    c.hour += minute as f64 / 60.0;
    s = rest;
    let Some(sec) = s.strip_prefix(':').and_then(|r| scan_float(r.trim_start())) else {
        return c;
    };
    if (0.0..=60.0).contains(&sec) {
        c.hour += sec / 3600.0;
    }
    c
}

/// An optionally signed decimal integer at the start of `s`, and what follows it.
fn scan_int(s: &str) -> Option<(i64, &str)> {
    let digits_from = usize::from(s.starts_with(['-', '+']));
    let end = s[digits_from..]
        .find(|c: char| !c.is_ascii_digit())
        .map_or(s.len(), |i| i + digits_from);
    if end == digits_from {
        return None;
    }
    Some((s[..end].parse().ok()?, &s[end..]))
}

/// The longest decimal number at the start of `s` (`strtod`'s plain forms).
fn scan_float(s: &str) -> Option<f64> {
    let end = s
        .find(|c: char| !(c.is_ascii_digit() || ".+-eE".contains(c)))
        .unwrap_or(s.len());
    (1..=end).rev().find_map(|i| s[..i].parse().ok())
}

/// Day of the year (from 1) of a date.
fn day_of_year(c: &Comp, cal: Calendar) -> i64 {
    let month = if (1..=12).contains(&c.month) {
        c.month
    } else {
        1
    };
    let lengths = cal.month_lengths(c.year);
    lengths[..(month - 1) as usize].iter().sum::<i64>() + c.day
}

/// Hours from 1970-01-01 to a date (cdtime's `Cdh2e`).
fn to_hours(c: &Comp, cal: Calendar) -> Option<f64> {
    let (cycle_years, cycle_days) = cal.cycle();
    let mut days = 0i64;
    let mut year = 1970i64;
    let whole = (c.year - year) / cycle_years;
    days = days.checked_add(whole.checked_mul(cycle_days)?)?;
    year += whole * cycle_years;
    while year < c.year {
        days += cal.days_in_year(year);
        year += 1;
    }
    while year > c.year {
        year -= 1;
        days -= cal.days_in_year(year);
    }
    let hours = (days + day_of_year(c, cal) - 1) as f64 * 24.0 + c.hour;
    (hours.abs() < MAX_HOURS).then_some(hours)
}

/// The date `hours` after 1970-01-01 (cdtime's `Cde2h`).
fn from_hours(hours: f64, cal: Calendar) -> Option<Comp> {
    if hours.is_nan() || hours.abs() >= MAX_HOURS {
        return None;
    }
    let mut doy = (hours / 24.0).floor() as i64 + 1;
    let mut hour = hours - (doy - 1) as f64 * 24.0;
    if hour >= 24.0 {
        doy += 1;
        hour -= 24.0;
    }
    let (cycle_years, cycle_days) = cal.cycle();
    let mut year = 1970i64;
    if doy > 0 {
        let whole = (doy - 1) / cycle_days;
        doy -= whole * cycle_days;
        year += whole * cycle_years;
        while doy > cal.days_in_year(year) {
            doy -= cal.days_in_year(year);
            year += 1;
        }
    } else {
        let whole = (-doy) / cycle_days;
        doy += whole * cycle_days;
        year -= whole * cycle_years;
        while doy <= 0 {
            year -= 1;
            doy += cal.days_in_year(year);
        }
    }
    let mut day = doy;
    let mut month = 1;
    for len in cal.month_lengths(year) {
        if day <= len {
            break;
        }
        day -= len;
        month += 1;
    }
    Some(Comp {
        year,
        month,
        day,
        hour,
    })
}

/// `months` whole months after the month holding `hours`, on the first of the month at
/// midnight (cdtime's `CdAddDelTime`).
fn add_months(hours: f64, months: i64, cal: Calendar) -> Option<Comp> {
    let start = from_hours(hours, cal)?;
    let total = months.checked_add(start.month - 1)?;
    let years = total.div_euclid(12);
    let end = Comp {
        year: start.year.checked_add(years)?,
        month: total.rem_euclid(12) + 1,
        day: 1,
        hour: 0.0,
    };
    from_hours(to_hours(&end, cal)?, cal)
}

/// Hours from cdtime's reference (1979-01-01) to a date, in a calendar.
fn rel_hours(c: &Comp, cal: Calendar) -> Option<f64> {
    let reference = Comp {
        year: 1979,
        month: 1,
        day: 1,
        hour: 0.0,
    };
    Some(to_hours(c, cal)? - to_hours(&reference, cal)?)
}

/// `hours` after a date, in one calendar (cdtime's `cdCompAdd`).
fn add_hours(c: &Comp, hours: f64, cal: Calendar) -> Option<Comp> {
    let reference = Comp {
        year: 1979,
        month: 1,
        day: 1,
        hour: 0.0,
    };
    let rel = rel_hours(c, cal)? + hours;
    from_hours(to_hours(&reference, cal)? + rel, cal)
}

/// `hours` after a date in the mixed calendar (cdtime's `cdCompAddMixed`).
fn add_mixed(c: Comp, hours: f64) -> Option<Comp> {
    let last_julian = Comp {
        year: 1582,
        month: 10,
        day: 5,
        hour: 0.0,
    };
    let first_gregorian = Comp {
        year: 1582,
        month: 10,
        day: 15,
        hour: 0.0,
    };
    if c.before(&first_gregorian) {
        let to_switch =
            rel_hours(&last_julian, Calendar::Julian)? - rel_hours(&c, Calendar::Julian)?;
        if hours <= to_switch {
            add_hours(&c, hours, Calendar::Julian)
        } else {
            add_hours(&first_gregorian, hours - to_switch, Calendar::Gregorian)
        }
    } else {
        let to_switch =
            rel_hours(&first_gregorian, Calendar::Gregorian)? - rel_hours(&c, Calendar::Gregorian)?;
        if hours > to_switch {
            add_hours(&c, hours, Calendar::Gregorian)
        } else {
            add_hours(&last_julian, hours - to_switch, Calendar::Julian)
        }
    }
}

/// A C `%4.4ld`-style number: at least `digits` digits, a minus sign before them.
fn padded(n: i64, digits: usize) -> String {
    if n < 0 {
        format!("-{:0digits$}", n.unsigned_abs())
    } else {
        format!("{n:0digits$}")
    }
}

/// cdtime's `cdComp2Iso`: the date, then the time as far as it is not zero, a time within
/// half a microsecond of a whole second counting as that second.
fn iso(c: &Comp, sep: char) -> String {
    const EPS_SEC: f64 = 0.5e-6;
    const EPS_MIN: f64 = EPS_SEC / 60.0;
    const EPS_HOUR: f64 = EPS_MIN / 60.0;
    let ihr = (c.hour + EPS_HOUR) as i64;
    let dtmp = 60.0 * (c.hour - ihr as f64);
    let imin = (dtmp + EPS_MIN) as i64;
    let sec = 60.0 * (dtmp - imin as f64);
    let isec = (sec + EPS_SEC) as i64;
    let date = format!(
        "{}-{}-{}",
        padded(c.year, 4),
        padded(c.month, 2),
        padded(c.day, 2)
    );
    if sec - isec as f64 >= EPS_SEC {
        format!("{date}{sep}{ihr:02}:{imin:02}:{sec:.6}")
    } else if isec != 0 {
        format!("{date}{sep}{ihr:02}:{imin:02}:{isec:02}")
    } else if imin != 0 {
        format!("{date}{sep}{ihr:02}:{imin:02}")
    } else if ihr != 0 {
        format!("{date}{sep}{ihr:02}")
    } else {
        date
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(units: &str, cal: Option<&str>, v: f64) -> String {
        let text = TimeUnits::parse(units, cal).unwrap().format(v, ' ');
        text.unwrap_or_else(|| panic!("{v} {units}: not a time"))
    }

    #[test]
    fn dates_as_debian_ncdump_prints_them() {
        // Expected texts from `ncdump -t` (netcdf 4.9.0) of the same values.
        let u = "days since 2000-01-15 06:30";
        assert_eq!(fmt(u, Some("360_day"), 31.0), "\"2000-02-16 06:30\"");
        assert_eq!(fmt(u, Some("noleap"), 59.25), "\"2000-03-15 12:30\"");
        assert_eq!(fmt(u, None, 400.5), "\"2001-02-18 18:30\"");
        assert_eq!(fmt("months since 2000-01-15", None, 1.0), "\"2000-02-01\"");
        assert_eq!(fmt("months since 2000-01-15", None, 0.0), "\"2000-01-15\"");
        assert_eq!(fmt("years since 1990", None, 2.9999), "\"1992-12-01\"");
        assert_eq!(fmt("days since -0100-01-01", None, -1.0), "\"-0101-12-31\"");
        assert_eq!(
            fmt("days since 1582-10-01", Some("standard"), 4.0),
            "\"1582-10-05\""
        );
        assert_eq!(
            fmt("days since 1582-10-01", Some("standard"), 5.0),
            "\"1582-10-16\""
        );
        assert_eq!(
            fmt("seconds since 1970-01-01T00:00:00Z", None, 1.5),
            "\"1970-01-01 00:00:1.500000\""
        );
        assert_eq!(
            fmt("hr since 2000-02-28 23:00:00", None, 1.0),
            "\"2000-02-29\""
        );
    }

    #[test]
    fn what_is_not_a_time() {
        assert!(TimeUnits::parse("m", None).is_none());
        assert!(TimeUnits::parse("days after 2000-01-01", None).is_none());
        // `since` is matched in lower case only, by ncdump as here.
        assert!(TimeUnits::parse("Days Since 2000-01-01", None).is_none());
        assert!(TimeUnits::parse("days since", None).is_none());
        assert!(TimeUnits::parse("days since 2000-01-01", Some("none")).is_none());
        assert!(TimeUnits::parse("days since 2000-01-01", Some("NONE")).is_none());
        assert!(TimeUnits::parse("days since 2000-01-01", Some("Non")).is_none());
        assert_eq!(fmt("days since 2000-01-01", None, f64::NAN), "NaN");
    }

    #[test]
    fn iso_t_separates_the_base_date_from_its_time_as_in_ncdump() {
        // Expected texts from Debian's `ncdump -t` (netcdf 4.9.0) of the value 1.25.
        for (units, want) in [
            ("days since 2000-01-01T12:00:00Z", "\"2000-01-02 18\""),
            ("days since 2000-01-01T12", "\"2000-01-02 18\""),
            (
                "hours since 2000-01-01T06:30:15 UTC",
                "\"2000-01-01 07:45:15\"",
            ),
            // Nothing before the `T`: cdtime's default base year.
            ("days since T12", "\"1979-01-02 06\""),
            // The time is the word after the `T`, blanks between them or not.
            ("days since 2000-01-01T", "\"2000-01-02 06\""),
            ("days since 2000-01-01T 06:00", "\"2000-01-02 12\""),
            // A `T` after the time of day is no separator.
            ("days since 2000-01-01 12:00T5", "\"2000-01-02 18\""),
            // Nor is a lower-case `t`.
            ("days since 2000-01-01t12", "\"2000-01-02 06\""),
        ] {
            assert_eq!(fmt(units, None, 1.25), want, "{units}");
        }
    }

    #[test]
    fn unit_words_and_calendars_are_matched_in_any_case_as_in_ncdump() {
        // Expected texts from Debian's `ncdump -t` (netcdf 4.9.0).
        for (units, want) in [
            ("DAYS since 2000-01-01", "\"2000-01-02 06\""),
            ("Hours since 2000-01-01", "\"2000-01-01 01:15\""),
            ("S since 2000-01-01", "\"2000-01-01 00:00:1.250000\""),
            ("MO since 2000-01-15", "\"2000-02-01\""),
        ] {
            assert_eq!(fmt(units, None, 1.25), want, "{units}");
        }
        let u = "days since 1582-10-01";
        for (cal, want) in [
            ("NOLEAP", "\"1583-11-05\""),
            ("No_Leap", "\"1583-11-05\""),
            ("365_DAY", "\"1583-11-05\""),
            ("360_DAY", "\"1583-11-11\""),
            ("ALL_LEAP", "\"1583-11-04\""),
            ("AllLeap", "\"1583-11-04\""),
            ("366_DAY", "\"1583-11-04\""),
            ("JULIAN", "\"1583-11-05\""),
            ("Proleptic_Gregorian", "\"1583-11-05\""),
            ("STANDARD", "\"1583-11-15\""),
            ("J", "\"1583-11-05\""),
        ] {
            assert_eq!(fmt(u, Some(cal), 400.0), want, "{cal}");
        }
    }

    proptest::proptest! {
        /// Any units text, calendar and value: an answer, quickly, never a panic (ncdump
        /// loops over years one by one and would take ages on some of these).
        #[test]
        fn any_units_and_value_are_answered(
            unit in "(s|sec|min|hr|hours|days|wk|mo|months|season|yr|years|x)",
            base in "-?[0-9]{1,20}(-[0-9]{1,3}(-[0-9]{1,3}( [0-9]{1,3}(:[0-9]{1,3}(:[0-9.e+-]{1,8})?)?)?)?)?",
            cal in proptest::option::of("(standard|julian|noleap|all_leap|360_day|proleptic_gregorian|n|x)"),
            value in proptest::num::f64::ANY,
        ) {
            let units = format!("{unit} since {base}");
            if let Some(tu) = TimeUnits::parse(&units, cal.as_deref()) {
                let text = tu.format(value, ' ');
                proptest::prop_assert!(text.is_none_or(|t| !t.is_empty()));
            }
        }
    }

    #[test]
    fn values_beyond_any_year_are_not_times() {
        for units in [
            "days since 2000-01-01",
            "months since 2000-01-01",
            "years since 1",
        ] {
            for v in [1e300, -1e300, 9.2e18, -9.2e18] {
                let text = TimeUnits::parse(units, Some("standard"))
                    .unwrap()
                    .format(v, ' ');
                assert_eq!(text, None, "{units} {v}");
            }
        }
        // `ncdump -t` (Debian's netcdf 4.9.0) of the same values.
        let u = "days since 2000-01-01";
        assert_eq!(fmt(u, Some("julian"), 1e9), "\"2739850-10-15\"");
        assert_eq!(fmt(u, Some("julian"), -1e9), "\"-2735851-03-19\"");
    }
}
