//! Renders shared by the event streams: streams that show the same page
//! state (the same fleet value and the same query, the same rollout view)
//! share one render of it, made by the first that needs it while the
//! others wait for it. With ten consoles on the fleet's first page, a
//! change costs one fleet build and one render, not ten.
//!
//! A value is known by its `Arc`'s address, and the cache holds the
//! `Arc`s of the values it has entries for (so no address is reused while
//! it names one): the newest [`SOURCES`], at most [`ENTRIES`] renders in
//! all — past that, a stream renders its own (correct, just not shared).

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::OnceCell;

/// Values whose renders are kept: the feed's newest fleet, and the one
/// before it for a stream that has not caught up yet.
const SOURCES: usize = 2;

/// Renders kept in all (distinct queries of open streams, per value):
/// ~50 KiB each for a fleet page of 100 rows.
const ENTRIES: usize = 32;

/// Renders counted, by page, for `/metrics`.
const RENDERS: &str = "meshhub_console_renders_total";

/// One render, made once.
type Slot = Arc<OnceCell<Option<Arc<str>>>>;

/// The renders of one page, shared by its streams.
pub struct Renders<S, K> {
    page: &'static str,
    inner: Mutex<Inner<S, K>>,
    made: AtomicU64,
}

struct Inner<S, K> {
    sources: VecDeque<Arc<S>>,
    entries: HashMap<(usize, K), Slot>,
}

impl<S, K> Renders<S, K>
where
    S: Send + Sync,
    K: Hash + Eq + Clone,
{
    /// An empty cache for `page` (the metric's label).
    pub fn new(page: &'static str) -> Self {
        Self {
            page,
            inner: Mutex::new(Inner {
                sources: VecDeque::new(),
                entries: HashMap::new(),
            }),
            made: AtomicU64::new(0),
        }
    }

    /// What `render` makes of `source` for `key`: made once per (source,
    /// key) however many streams ask (the others wait for the first), its
    /// text shared. `None` when `render` could not (not kept: the next ask
    /// renders again).
    pub async fn get(
        &self,
        source: &Arc<S>,
        key: &K,
        render: impl FnOnce(&S, &K) -> Option<String>,
    ) -> Option<Arc<str>> {
        let make = || {
            self.made.fetch_add(1, Ordering::Relaxed);
            metrics::counter!(RENDERS, "page" => self.page).increment(1);
            render(source, key).map(Arc::from)
        };
        match self.slot(source, key) {
            Some(slot) => {
                let made = slot.get_or_init(|| async move { make() }).await.clone();
                if made.is_none() {
                    self.forget(source, key, &slot);
                }
                made
            }
            None => make(),
        }
    }

    /// How many renders were made (shared or not).
    pub fn made(&self) -> u64 {
        self.made.load(Ordering::Relaxed)
    }

    /// Drops every render and value (nobody follows the page).
    pub fn clear(&self) {
        let mut inner = self.lock();
        inner.sources.clear();
        inner.entries.clear();
    }

    fn lock(&self) -> MutexGuard<'_, Inner<S, K>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The slot of (`source`, `key`), made if there is room; `None`
    /// when the cache is full.
    fn slot(&self, source: &Arc<S>, key: &K) -> Option<Slot> {
        let mut inner = self.lock();
        let id = address(source);
        if !inner.sources.iter().any(|s| Arc::ptr_eq(s, source)) {
            inner.sources.push_back(source.clone());
            while inner.sources.len() > SOURCES {
                if let Some(old) = inner.sources.pop_front() {
                    let old = address(&old);
                    inner.entries.retain(|(s, _), _| *s != old);
                }
            }
        }
        let at = (id, key.clone());
        if let Some(slot) = inner.entries.get(&at) {
            return Some(slot.clone());
        }
        if inner.entries.len() >= ENTRIES {
            return None;
        }
        let slot = Slot::default();
        inner.entries.insert(at, slot.clone());
        Some(slot)
    }

    /// Removes `slot` (a render that failed) unless replaced meanwhile.
    fn forget(&self, source: &Arc<S>, key: &K, slot: &Slot) {
        let mut inner = self.lock();
        let at = (address(source), key.clone());
        if inner.entries.get(&at).is_some_and(|s| Arc::ptr_eq(s, slot)) {
            inner.entries.remove(&at);
        }
    }
}

fn address<S>(source: &Arc<S>) -> usize {
    Arc::as_ptr(source) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_render_per_value_and_key_however_many_ask() {
        let cache: Renders<u32, &str> = Renders::new("test");
        let a = Arc::new(1);
        let render = |s: &u32, k: &&str| Some(format!("{k}{s}"));
        let texts = futures::future::join_all((0..10).map(|_| cache.get(&a, &"p", render))).await;
        assert_eq!(cache.made(), 1, "ten asks of one state: one render");
        assert!(texts.iter().all(|t| t.as_deref() == Some("p1")));
        assert!(
            texts
                .windows(2)
                .all(|w| Arc::ptr_eq(w[0].as_ref().unwrap(), w[1].as_ref().unwrap())),
            "one text shared"
        );
        cache.get(&a, &"q", render).await;
        assert_eq!(cache.made(), 2, "another key renders");
        let b = Arc::new(2);
        assert_eq!(cache.get(&b, &"p", render).await.as_deref(), Some("p2"));
        assert_eq!(cache.made(), 3, "another value renders");
        // The value before is kept for a stream behind; a third drops it.
        cache.get(&a, &"p", render).await;
        assert_eq!(cache.made(), 3);
        let c = Arc::new(3);
        cache.get(&c, &"p", render).await;
        cache.get(&a, &"p", render).await;
        assert_eq!(cache.made(), 5, "the oldest value's renders dropped");
    }

    #[tokio::test]
    async fn a_failed_render_is_not_kept_and_a_full_cache_renders_unshared() {
        let cache: Renders<u32, usize> = Renders::new("test");
        let a = Arc::new(1);
        assert_eq!(cache.get(&a, &0, |_, _| None).await, None);
        assert_eq!(
            cache.get(&a, &0, |_, _| Some("x".into())).await.as_deref(),
            Some("x")
        );
        assert_eq!(cache.made(), 2, "the failure was not kept");
        for k in 1..ENTRIES + 5 {
            cache.get(&a, &k, |_, k| Some(k.to_string())).await;
        }
        let made = cache.made();
        // Past the bound: correct, not shared.
        let past = ENTRIES + 3;
        let text = cache.get(&a, &past, |_, k| Some(k.to_string())).await;
        assert_eq!(text.as_deref(), Some(past.to_string().as_str()));
        assert_eq!(cache.made(), made + 1);
        assert!(cache.lock().entries.len() <= ENTRIES);
        cache.clear();
        assert!(cache.lock().sources.is_empty() && cache.lock().entries.is_empty());
    }
}
