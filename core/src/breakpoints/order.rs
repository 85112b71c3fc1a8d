//! The order of breakpoint changes: events are published in the order the
//! store made the changes, while adds need not wait for each other's sync
//! to disk.
//!
//! A change takes the queue (a lock) to read what it changes and hand its
//! write to the store, which commits writes in the order they were handed
//! over. Before letting go it takes a ticket; it publishes when every
//! earlier ticket has published. An add reads nothing, so it lets go of the
//! queue as soon as its write is handed over, and adds made together share
//! one commit (`store/writer.rs`); an update or removal reads the row first,
//! so it keeps the queue until its write is durable.

use std::sync::{
    Arc,
    atomic::{AtomicU64, Ordering},
};

use tokio::sync::{Mutex, OwnedMutexGuard, watch};

/// The queue and the tickets.
pub(super) struct ChangeOrder {
    queue: Arc<Mutex<()>>,
    /// The next ticket to hand out; only taken with the queue held.
    next: AtomicU64,
    /// How many tickets have published.
    published: watch::Sender<u64>,
}

/// The queue, held.
pub(super) type Held = OwnedMutexGuard<()>;

/// A place in the publishing order. Redeem it with `in_turn`; one dropped
/// unredeemed (a change that failed) still waits for its turn and passes
/// it on, so later changes never wait forever.
pub(super) struct Ticket {
    number: u64,
    published: watch::Sender<u64>,
    redeemed: bool,
}

impl ChangeOrder {
    pub(super) fn new() -> Arc<Self> {
        Arc::new(Self {
            queue: Arc::new(Mutex::new(())),
            next: AtomicU64::new(0),
            published: watch::Sender::new(0),
        })
    }

    /// Waits for the queue.
    pub(super) async fn hold(&self) -> Held {
        self.queue.clone().lock_owned().await
    }

    /// The next place in the order; `_held` shows the queue is held, so
    /// tickets follow the order writes reach the store.
    pub(super) fn ticket(&self, _held: &Held) -> Ticket {
        Ticket {
            number: self.next.fetch_add(1, Ordering::Relaxed),
            published: self.published.clone(),
            redeemed: false,
        }
    }
}

impl Ticket {
    /// Runs `publish` once every earlier ticket has, then lets the next go.
    pub(super) async fn in_turn<R>(mut self, publish: impl FnOnce() -> R) -> R {
        self.redeemed = true;
        wait_for_turn(&self.published, self.number).await;
        let out = publish();
        self.published.send_modify(|n| *n += 1);
        out
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.redeemed {
            return;
        }
        let (published, number) = (self.published.clone(), self.number);
        tokio::spawn(async move {
            wait_for_turn(&published, number).await;
            published.send_modify(|n| *n += 1);
        });
    }
}

async fn wait_for_turn(published: &watch::Sender<u64>, number: u64) {
    let mut turn = published.subscribe();
    // The sender lives in the ticket itself, so the channel never closes.
    let _ = turn.wait_for(|&done| done == number).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn tickets_publish_in_the_order_they_were_taken() {
        let order = ChangeOrder::new();
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        let mut tickets = Vec::new();
        for i in 0..50u64 {
            let held = order.hold().await;
            tickets.push((i, order.ticket(&held)));
        }
        // Redeemed in reverse, and every fifth dropped: the rest still
        // publish in ticket order.
        while let Some((i, ticket)) = tickets.pop() {
            if i % 5 == 0 {
                drop(ticket);
                continue;
            }
            let seen = seen.clone();
            tasks.push(tokio::spawn(async move {
                ticket.in_turn(|| seen.lock().unwrap().push(i)).await;
            }));
        }
        for task in tasks {
            task.await.unwrap();
        }
        let seen = seen.lock().unwrap().clone();
        let expected: Vec<u64> = (0..50).filter(|i| i % 5 != 0).collect();
        assert_eq!(seen, expected);
    }
}
