//! Prints every clock this process reads, one `name seconds.nanoseconds` line each, each time a
//! line arrives on stdin (and once at start): a dynamically linked Rust program's view of its
//! clocks, for the clock shim's tests. `SystemTime` is what a Rust gateway dates its rows with.

use std::io::BufRead as _;
use std::time::{SystemTime, UNIX_EPOCH};

fn clock(id: libc::clockid_t) -> String {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec for clock_gettime to write.
    let status = unsafe { libc::clock_gettime(id, &mut now) };
    if status == 0 {
        format!("{}.{:09}", now.tv_sec, now.tv_nsec)
    } else {
        "error".to_owned()
    }
}

fn print_clocks() {
    let system_time = SystemTime::now().duration_since(UNIX_EPOCH).map_or_else(
        |_| "before-1970".to_owned(),
        |d| format!("{}.{:09}", d.as_secs(), d.subsec_nanos()),
    );
    let mut timeval = libc::timeval {
        tv_sec: 0,
        tv_usec: 0,
    };
    // SAFETY: `timeval` is valid to write; a null time zone is allowed.
    let status = unsafe { libc::gettimeofday(&mut timeval, std::ptr::null_mut()) };
    let gettimeofday = if status == 0 {
        format!("{}.{:06}000", timeval.tv_sec, timeval.tv_usec)
    } else {
        "error".to_owned()
    };
    // SAFETY: time() with a null pointer only returns the time.
    let time = unsafe { libc::time(std::ptr::null_mut()) };
    println!("system_time {system_time}");
    println!("realtime {}", clock(libc::CLOCK_REALTIME));
    println!("realtime_coarse {}", clock(libc::CLOCK_REALTIME_COARSE));
    println!("gettimeofday {gettimeofday}");
    println!("time {time}.000000000");
    println!("monotonic {}", clock(libc::CLOCK_MONOTONIC));
    println!("monotonic_raw {}", clock(libc::CLOCK_MONOTONIC_RAW));
    println!("boottime {}", clock(libc::CLOCK_BOOTTIME));
    println!("end");
}

fn main() {
    print_clocks();
    for line in std::io::stdin().lock().lines() {
        if line.is_err() {
            break;
        }
        print_clocks();
    }
}
