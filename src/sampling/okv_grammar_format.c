/* okv_grammar_format.c — the string formats a schema may ask for ("format":
 * "date", "time", "date-time", "uuid"), as small machines over the bytes
 * between a string's quotes. The matcher (okv_grammar_match.c) hands every
 * byte of such a string here and lets the closing quote through only when
 * gf_complete says the text is a whole value.
 *
 * Only valid values get through, not merely well-shaped ones: months 01-12,
 * days up to the month's length (29 February in leap years only), hours
 * 00-23, minutes and seconds 00-59, years 1000-9999. The forms are RFC 3339's
 * (what JSON Schema names): date YYYY-MM-DD; time HH:MM:SS[.f]Z-or-offset
 * (an offset is required, as RFC 3339's full-time has it); date-time the two
 * joined by 'T'; uuid 8-4-4-4-12 hex digits. Fractions take 1-9 digits.
 *
 * State lives in the string's frame, which is plain data: `key` is the
 * segment being read, `count` the position in it and `cand` packs the
 * numbers later bytes depend on (year, month, the last tens digit). */
#include "okv_grammar_internal.h"

enum { SEG_DATE, SEG_T, SEG_TIME, SEG_TAIL, SEG_FRAC, SEG_OFFSET, SEG_UUID, SEG_DONE };

#define FRAC_MAX 9

/* cand: bits 0-13 year, 16-19 month, 24-27 the tens digit just read, 32-35 fraction digits. */
static unsigned year_of(uint64_t p) { return (unsigned)(p & 0x3FFF); }
static unsigned month_of(uint64_t p) { return (unsigned)((p >> 16) & 0xF); }
static unsigned tens_of(uint64_t p) { return (unsigned)((p >> 24) & 0xF); }
static unsigned frac_of(uint64_t p) { return (unsigned)((p >> 32) & 0xF); }
static uint64_t with(uint64_t p, int shift, uint64_t mask, unsigned v) { return (p & ~(mask << shift)) | ((uint64_t)v << shift); }

static bool digit_in(unsigned char c, char lo, char hi) { return c >= (unsigned char)lo && c <= (unsigned char)hi; }
static bool is_hex_digit(unsigned char c) { return digit_in(c, '0', '9') || digit_in(c, 'a', 'f') || digit_in(c, 'A', 'F'); }

static unsigned days_in(unsigned month, unsigned year) {
    static const unsigned char days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
    return month == 2 && leap ? 29 : days[month - 1];
}

void gf_start(int format, gm_frame *f) {
    f->count = 0;
    f->cand = 0;
    f->key = format == GN_FMT_TIME ? SEG_TIME : format == GN_FMT_UUID ? SEG_UUID : SEG_DATE;
}

static void next_segment(gm_frame *f, int seg) {
    f->key = seg;
    f->count = 0;
}

/* A two-digit field whose value lies in [lo, hi] (lo's tens may be 0): the
 * tens digit is remembered in cand, the units checked against it. */
static bool two_digits(gm_frame *f, unsigned pos, unsigned char c, unsigned lo, unsigned hi) {
    if (!digit_in(c, '0', '9')) return false;
    unsigned d = (unsigned)(c - '0');
    if (pos == 0) {
        if (d > hi / 10 || d < lo / 10) return false;
        f->cand = with(f->cand, 24, 0xF, d);
        return true;
    }
    unsigned v = tens_of(f->cand) * 10 + d;
    return v >= lo && v <= hi;
}

static bool date_byte(gm_frame *f, unsigned char c) {
    unsigned p = f->count;
    if (p < 4) {
        if (!digit_in(c, p == 0 ? '1' : '0', '9')) return false;
        f->cand = with(f->cand, 0, 0x3FFF, year_of(f->cand) * 10 + (unsigned)(c - '0'));
        return true;
    }
    if (p == 4 || p == 7) return c == '-';
    if (p == 5 || p == 6) {
        if (!two_digits(f, p - 5, c, 1, 12)) return false;
        if (p == 6) f->cand = with(f->cand, 16, 0xF, tens_of(f->cand) * 10 + (unsigned)(c - '0'));
        return true;
    }
    if (p == 8 || p == 9) return two_digits(f, p - 8, c, 1, days_in(month_of(f->cand), year_of(f->cand)));
    return false;
}

/* A byte of HH:MM:SS (a time) or HH:MM (an offset) at position count. */
static bool clock_byte(gm_frame *f, unsigned char c) {
    unsigned p = f->count;
    if (p == 2 || p == 5) return c == ':';
    if (p < 2) return two_digits(f, p, c, 0, 23);
    return two_digits(f, (p - 3) % 3, c, 0, 59);
}

static bool zone_start(gm_frame *f, unsigned char c) {
    if (c == 'Z') { next_segment(f, SEG_DONE); return true; }
    if (c == '+' || c == '-') { next_segment(f, SEG_OFFSET); return true; }
    return false;
}

/* Consumes one byte of the string's text (never its closing quote). */
bool gf_byte(int format, gm_frame *f, unsigned char c) {
    bool ok;
    switch (f->key) {
    case SEG_DATE:
        if (!date_byte(f, c)) return false;
        if (++f->count == 10) next_segment(f, format == GN_FMT_DATE ? SEG_DONE : SEG_T);
        return true;
    case SEG_T:
        if (c != 'T') return false;
        next_segment(f, SEG_TIME);
        return true;
    case SEG_TIME:
        if (!clock_byte(f, c)) return false;
        if (++f->count == 8) next_segment(f, SEG_TAIL);
        return true;
    case SEG_TAIL:
        if (c == '.') { next_segment(f, SEG_FRAC); return true; }
        return zone_start(f, c);
    case SEG_FRAC:
        if (digit_in(c, '0', '9')) {
            if (frac_of(f->cand) >= FRAC_MAX) return false;
            f->cand = with(f->cand, 32, 0xF, frac_of(f->cand) + 1);
            return true;
        }
        return frac_of(f->cand) > 0 && zone_start(f, c);
    case SEG_OFFSET:   /* HH:MM after the sign */
        ok = clock_byte(f, c);
        if (ok && ++f->count == 5) next_segment(f, SEG_DONE);
        return ok;
    case SEG_UUID: {
        unsigned p = f->count;
        ok = (p == 8 || p == 13 || p == 18 || p == 23) ? c == '-' : is_hex_digit(c);
        if (ok && ++f->count == 36) next_segment(f, SEG_DONE);
        return ok;
    }
    default: return false;   /* SEG_DONE: only the closing quote may follow */
    }
}

bool gf_complete(const gm_frame *f) { return f->key == SEG_DONE; }

int gf_parse(const char *name) {
    if (!strcmp(name, "date")) return GN_FMT_DATE;
    if (!strcmp(name, "time")) return GN_FMT_TIME;
    if (!strcmp(name, "date-time")) return GN_FMT_DATE_TIME;
    if (!strcmp(name, "uuid")) return GN_FMT_UUID;
    return GN_FMT_NONE;
}
