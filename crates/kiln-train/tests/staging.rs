//! Integration tests of `StagingArea`, the bounded closable queue between pipeline stages:
//! `put` blocks while full and `get` while empty, `get_timeout` times out, `close` wakes
//! blocked getters and putters (handing the item back) while items put before it still
//! drain in FIFO order, `peek` does not take, `clear` counts and unblocks, the stats count
//! items and waiting time, and many producers and consumers deliver every item exactly once.
//! Timing checks are one-sided with generous margins, and every test that could hang runs
//! under a deadline.

mod common;
use common::within;

use kiln_train::{Closed, Error, Got, StagingArea, StagingStats};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, TryRecvError};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

/// How long a thread is given to reach a blocking call before we check it is blocked.
const SETTLE: Duration = Duration::from_millis(150);
/// How long we wait for something that should happen promptly.
const PROMPT: Duration = Duration::from_secs(5);

/// Waits until `flag` is set, for at most [`PROMPT`].
fn wait_for(flag: &AtomicBool) -> bool {
    let start = Instant::now();
    while start.elapsed() < PROMPT {
        if flag.load(Ordering::SeqCst) {
            return true;
        }
        thread::sleep(Duration::from_millis(5));
    }
    flag.load(Ordering::SeqCst)
}

fn area<T>(capacity: usize) -> StagingArea<T> {
    StagingArea::new(capacity).unwrap_or_else(|e| panic!("StagingArea::new({capacity}): {e}"))
}

#[test]
fn zero_capacity_is_an_error_naming_the_operation() {
    match StagingArea::<u8>::new(0) {
        Err(e) => {
            assert!(
                matches!(&e, Error::Invalid { op, .. } if *op == "StagingArea::new"),
                "{e:?}"
            );
            assert!(e.to_string().contains("StagingArea::new"), "{e}");
        }
        Ok(_) => panic!("a capacity of 0 was accepted"),
    }
}

#[test]
fn size_and_capacity() {
    let a = area(3);
    assert_eq!((a.capacity(), a.size()), (3, 0));
    a.put(1).expect("put into an open area");
    a.put(2).expect("put into an open area");
    assert_eq!((a.capacity(), a.size()), (3, 2));
    let clone = a.clone();
    assert_eq!(clone.size(), 2, "clones share the queue");
    assert_eq!(clone.get(), Some(1));
    assert_eq!(a.size(), 1);
    assert!(!a.is_closed());
}

#[test]
fn put_blocks_while_full_until_a_get() {
    within("put blocks while full", 30, || {
        let a = area(2);
        a.put(1).expect("put");
        a.put(2).expect("put");
        let done = Arc::new(AtomicBool::new(false));
        let producer = {
            let (a, done) = (a.clone(), done.clone());
            thread::spawn(move || {
                let r = a.put(3);
                done.store(true, Ordering::SeqCst);
                r
            })
        };
        thread::sleep(SETTLE);
        assert!(
            !done.load(Ordering::SeqCst),
            "put into a full area returned"
        );
        assert_eq!(a.size(), 2);
        assert_eq!(a.get(), Some(1));
        assert!(wait_for(&done), "a get did not let the blocked put go on");
        let r = producer.join().expect("the producer thread panicked");
        assert_eq!(r, Ok(()));
        assert_eq!((a.get(), a.get()), (Some(2), Some(3)));
    });
}

#[test]
fn get_blocks_while_empty_until_a_put() {
    within("get blocks while empty", 30, || {
        let a = area::<i32>(2);
        let (tx, rx) = channel();
        let consumer = {
            let a = a.clone();
            thread::spawn(move || {
                let _ = tx.send(a.get());
            })
        };
        thread::sleep(SETTLE);
        assert_eq!(
            rx.try_recv(),
            Err(TryRecvError::Empty),
            "get returned while empty"
        );
        a.put(5).expect("put");
        assert_eq!(rx.recv_timeout(PROMPT), Ok(Some(5)));
        consumer.join().expect("the consumer thread panicked");
    });
}

#[test]
fn get_timeout_times_out_takes_and_reports_closed() {
    within("get_timeout", 30, || {
        let a = area::<u32>(2);
        let start = Instant::now();
        assert_eq!(a.get_timeout(Duration::from_millis(50)), Got::TimedOut);
        assert!(
            start.elapsed() >= Duration::from_millis(50),
            "{:?}",
            start.elapsed()
        );
        a.put(7).expect("put");
        assert_eq!(a.get_timeout(Duration::from_millis(50)), Got::Item(7));
        assert_eq!(a.get_timeout(Duration::ZERO), Got::TimedOut);
        // an item arriving before the deadline is taken at once
        let producer = {
            let a = a.clone();
            thread::spawn(move || {
                thread::sleep(Duration::from_millis(50));
                a.put(8)
            })
        };
        let start = Instant::now();
        assert_eq!(a.get_timeout(Duration::from_secs(20)), Got::Item(8));
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(producer.join().expect("producer"), Ok(()));
        // closed: items first, then Closed (not TimedOut), without waiting
        a.put(9).expect("put");
        a.close();
        assert_eq!(a.get_timeout(Duration::from_secs(20)), Got::Item(9));
        let start = Instant::now();
        assert_eq!(a.get_timeout(Duration::from_secs(20)), Got::Closed);
        assert!(start.elapsed() < Duration::from_secs(10));
    });
}

#[test]
fn close_wakes_blocked_getters() {
    within("close wakes getters", 30, || {
        let a = area::<u8>(1);
        let (tx, rx) = channel();
        let getter = {
            let (a, tx) = (a.clone(), tx.clone());
            thread::spawn(move || {
                let _ = tx.send(format!("{:?}", a.get()));
            })
        };
        let timed = {
            let a = a.clone();
            thread::spawn(move || {
                let _ = tx.send(format!("{:?}", a.get_timeout(Duration::from_secs(60))));
            })
        };
        thread::sleep(SETTLE);
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
        a.close();
        let mut got = vec![
            rx.recv_timeout(PROMPT)
                .expect("a blocked getter was not woken by close"),
            rx.recv_timeout(PROMPT)
                .expect("a blocked getter was not woken by close"),
        ];
        got.sort();
        assert_eq!(got, vec!["Closed".to_string(), "None".to_string()]);
        getter.join().expect("getter");
        timed.join().expect("timed getter");
    });
}

#[test]
fn close_wakes_a_blocked_putter_and_hands_the_item_back() {
    within("close wakes a putter", 30, || {
        let a = area::<String>(1);
        a.put("first".to_string()).expect("put");
        let (tx, rx) = channel();
        let putter = {
            let a = a.clone();
            thread::spawn(move || {
                let _ = tx.send(a.put("second".to_string()));
            })
        };
        thread::sleep(SETTLE);
        assert_eq!(
            rx.try_recv(),
            Err(TryRecvError::Empty),
            "put into a full area returned"
        );
        a.close();
        assert!(a.is_closed());
        let r = rx
            .recv_timeout(PROMPT)
            .expect("a blocked putter was not woken by close");
        assert_eq!(r, Err(Closed("second".to_string())));
        putter.join().expect("putter");
        // the item put before the close is still there, then the end
        assert_eq!(a.get(), Some("first".to_string()));
        assert_eq!(a.get(), None);
    });
}

#[test]
fn items_put_before_close_drain_in_fifo_order() {
    let a = area(5);
    for i in 0..5 {
        a.put(i).expect("put");
    }
    a.close();
    match a.put(99) {
        Err(e) => {
            assert!(e.to_string().contains("closed"), "{e}");
            assert_eq!(e.0, 99);
        }
        Ok(()) => panic!("a closed area took an item"),
    }
    let drained: Vec<i32> = std::iter::from_fn(|| a.get()).collect();
    assert_eq!(drained, vec![0, 1, 2, 3, 4]);
    assert_eq!(a.size(), 0);
    assert_eq!(a.get(), None);
    assert_eq!(a.get_timeout(Duration::from_secs(10)), Got::Closed);
    assert_eq!(a.stats().puts, 5, "the refused put is not counted");
    assert_eq!(a.stats().gets, 5);
}

#[test]
fn peek_does_not_take() {
    let a = area(3);
    a.put('a').expect("put");
    a.put('b').expect("put");
    assert_eq!(a.peek(0, |c| *c), Some('a'));
    assert_eq!(a.peek(1, |c| *c), Some('b'));
    assert_eq!(a.peek(0, |c| *c), Some('a'));
    assert_eq!(a.size(), 2);
    assert_eq!(a.get(), Some('a'));
    assert_eq!(a.peek(0, |c| c.to_ascii_uppercase()), Some('B'));
    assert_eq!(a.size(), 1);
    // an index the area can never hold: no wait
    let start = Instant::now();
    assert_eq!(a.peek(3, |c| *c), None);
    assert!(start.elapsed() < Duration::from_secs(5));
    a.close();
    assert_eq!(a.peek(1, |c| *c), None, "closed with fewer items");
    assert_eq!(a.peek(0, |c| *c), Some('b'));
}

#[test]
fn peek_waits_for_its_index_and_close_wakes_it() {
    within("peek waits", 30, || {
        let a = area::<u32>(3);
        let (tx, rx) = channel();
        let peeker = {
            let a = a.clone();
            thread::spawn(move || {
                let _ = tx.send(a.peek(1, |x| *x));
            })
        };
        thread::sleep(SETTLE);
        a.put(10).expect("put");
        thread::sleep(SETTLE);
        assert_eq!(
            rx.try_recv(),
            Err(TryRecvError::Empty),
            "peek(1) saw one item"
        );
        a.put(11).expect("put");
        assert_eq!(rx.recv_timeout(PROMPT), Ok(Some(11)));
        peeker.join().expect("peeker");
        assert_eq!(a.size(), 2);

        let (tx, rx) = channel();
        let peeker = {
            let a = a.clone();
            thread::spawn(move || {
                let _ = tx.send(a.peek(2, |x| *x));
            })
        };
        thread::sleep(SETTLE);
        assert_eq!(rx.try_recv(), Err(TryRecvError::Empty));
        a.close();
        assert_eq!(rx.recv_timeout(PROMPT), Ok(None), "close did not wake peek");
        peeker.join().expect("peeker");
    });
}

/// A waiting `peek` must not swallow the wake-up a `put` owes a waiting `get`.
#[test]
fn a_waiting_peek_does_not_starve_a_waiting_get() {
    let a = area::<u32>(3);
    // the peeker waits first, for an index one put will not fill
    let peeker = {
        let a = a.clone();
        thread::spawn(move || a.peek(1, |x| *x))
    };
    thread::sleep(SETTLE);
    let (tx, rx) = channel();
    let getter = {
        let a = a.clone();
        thread::spawn(move || {
            let _ = tx.send(a.get());
        })
    };
    thread::sleep(SETTLE);
    a.put(1).expect("put");
    let got = rx.recv_timeout(Duration::from_secs(2));
    // let every thread go before asserting, so a failure does not leave them blocked
    a.close();
    let _ = getter.join();
    let _ = peeker.join();
    assert_eq!(
        got,
        Ok(Some(1)),
        "a get waiting on an area that holds an item was not woken by the put"
    );
}

/// The same lost wake-up seen through `get_timeout`: with an item in the area it sleeps
/// until its deadline instead of taking the item at once.
#[test]
fn a_waiting_peek_does_not_delay_get_timeout() {
    let a = area::<u32>(3);
    let peeker = {
        let a = a.clone();
        thread::spawn(move || a.peek(1, |x| *x))
    };
    thread::sleep(SETTLE);
    let getter = {
        let a = a.clone();
        thread::spawn(move || a.get_timeout(Duration::from_secs(3)))
    };
    thread::sleep(SETTLE);
    let put_at = Instant::now();
    a.put(1).expect("put");
    let got = getter.join().expect("getter");
    let waited = put_at.elapsed();
    a.close();
    let _ = peeker.join();
    assert_eq!(got, Got::Item(1));
    assert!(
        waited < Duration::from_secs(1),
        "get_timeout took the item {waited:?} after it was put (its deadline was 3 s)"
    );
}

#[test]
fn clear_counts_and_unblocks_a_putter() {
    within("clear unblocks a putter", 30, || {
        let a = area(2);
        assert_eq!(a.clear(), 0);
        a.put(1).expect("put");
        a.put(2).expect("put");
        let done = Arc::new(AtomicBool::new(false));
        let putter = {
            let (a, done) = (a.clone(), done.clone());
            thread::spawn(move || {
                let r = a.put(3);
                done.store(true, Ordering::SeqCst);
                r
            })
        };
        thread::sleep(SETTLE);
        assert!(
            !done.load(Ordering::SeqCst),
            "put into a full area returned"
        );
        assert_eq!(a.clear(), 2);
        assert!(wait_for(&done), "clear did not unblock the putter");
        assert_eq!(putter.join().expect("putter"), Ok(()));
        assert_eq!(a.size(), 1);
        assert_eq!(a.get(), Some(3));
        assert!(!a.is_closed(), "clear does not close");
    });
}

#[test]
fn stats_count_items() {
    let a = area(4);
    assert_eq!(a.stats(), StagingStats::default());
    for i in 0..3 {
        a.put(i).expect("put");
    }
    a.get();
    a.get();
    let s = a.stats();
    assert_eq!((s.puts, s.gets), (3, 2));
    a.clear();
    let s = a.stats();
    assert_eq!((s.puts, s.gets), (3, 2), "cleared items are not gets");
    assert_eq!(a.get_timeout(Duration::from_millis(1)), Got::TimedOut);
    assert_eq!(a.stats().gets, 2, "a timeout is not a get");
}

#[test]
fn get_wait_grows_when_the_producer_is_slow() {
    within("get_wait", 30, || {
        let a = area::<u8>(2);
        let producer = {
            let a = a.clone();
            thread::spawn(move || {
                thread::sleep(Duration::from_millis(50));
                a.put(1)
            })
        };
        assert_eq!(a.get(), Some(1));
        assert_eq!(producer.join().expect("producer"), Ok(()));
        let s = a.stats();
        assert!(s.get_wait >= Duration::from_millis(30), "{s:?}");
        assert_eq!(s.gets, 1);
    });
}

#[test]
fn put_wait_grows_when_the_consumer_is_slow() {
    within("put_wait", 30, || {
        let a = area::<u8>(1);
        a.put(1).expect("put");
        let consumer = {
            let a = a.clone();
            thread::spawn(move || {
                thread::sleep(Duration::from_millis(50));
                a.get()
            })
        };
        a.put(2).expect("put");
        assert_eq!(consumer.join().expect("consumer"), Some(1));
        let s = a.stats();
        assert!(s.put_wait >= Duration::from_millis(30), "{s:?}");
        assert_eq!(s.puts, 2);
    });
}

#[test]
fn many_producers_and_consumers_deliver_every_item_once() {
    const PRODUCERS: usize = 4;
    const ITEMS: usize = 1000;
    let (per_consumer, stats) = within("4 producers, 2 consumers", 60, || {
        let a = area::<usize>(3);
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let a = a.clone();
                thread::spawn(move || {
                    for i in 0..ITEMS {
                        a.put(p * ITEMS + i).expect("put into an open area");
                    }
                })
            })
            .collect();
        let consumers: Vec<_> = (0..2)
            .map(|_| {
                let a = a.clone();
                thread::spawn(move || std::iter::from_fn(|| a.get()).collect::<Vec<usize>>())
            })
            .collect();
        for p in producers {
            p.join().expect("a producer panicked");
        }
        a.close();
        let per_consumer: Vec<Vec<usize>> = consumers
            .into_iter()
            .map(|c| c.join().expect("a consumer panicked"))
            .collect();
        (per_consumer, a.stats())
    });
    let mut all: Vec<usize> = per_consumer.concat();
    all.sort_unstable();
    assert_eq!(all, (0..PRODUCERS * ITEMS).collect::<Vec<_>>());
    // FIFO: each consumer sees each producer's items in the order they were put
    for (c, items) in per_consumer.iter().enumerate() {
        for p in 0..PRODUCERS {
            let mine: Vec<usize> = items.iter().copied().filter(|x| x / ITEMS == p).collect();
            assert!(
                mine.windows(2).all(|w| w[0] < w[1]),
                "consumer {c} saw producer {p}'s items out of order"
            );
        }
    }
    assert_eq!((stats.puts, stats.gets), (4000, 4000));
}
