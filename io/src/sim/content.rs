//! The bytes of one simulated file image: sparse pages shared copy-on-write. A hole (never
//! written, or only allocated) costs nothing and reads as zeros; a file's buffered and durable
//! images share every page they have in common, so a synced file is held once. Memory tracks
//! the live written bytes, not the file sizes nor their history. A page that one write fills
//! whole is shared with every live page of the process holding the same bytes: the replicas of
//! a simulated cluster journal the same entries at the same offsets, and hold them once.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, Weak};

/// Bytes per page: large enough that a page map stays small, small enough that a short write
/// into a shared page copies little.
pub(crate) const PAGE: usize = 16 << 10;
const PAGE_U64: u64 = PAGE as u64;

type Page = Arc<[u8; PAGE]>;

/// The live pages of the process that some write filled whole, by a hash of their bytes (a
/// hit is compared byte for byte before it is shared). Dead entries are swept as it grows.
struct Interner {
    pages: HashMap<u64, Vec<Weak<[u8; PAGE]>>>,
    /// Insertions until the next sweep.
    until_sweep: usize,
}

static INTERNER: Mutex<Option<Interner>> = Mutex::new(None);

/// The page holding `bytes`: a live one with the same bytes if there is one, a new one (then
/// known to later writes) otherwise.
fn intern(bytes: &[u8]) -> Page {
    let hash = xxhash_rust::xxh3::xxh3_64(bytes);
    let mut guard = INTERNER
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let interner = guard.get_or_insert_with(|| Interner {
        pages: HashMap::new(),
        until_sweep: 1 << 16,
    });
    let candidates = interner.pages.entry(hash).or_default();
    if let Some(page) = candidates
        .iter()
        .filter_map(Weak::upgrade)
        .find(|page| page[..] == *bytes)
    {
        return page;
    }
    let mut page = Arc::new([0u8; PAGE]);
    Arc::make_mut(&mut page).copy_from_slice(bytes);
    candidates.retain(|weak| weak.strong_count() > 0);
    candidates.push(Arc::downgrade(&page));
    interner.until_sweep -= 1;
    if interner.until_sweep == 0 {
        interner.pages.retain(|_, weaks| {
            weaks.retain(|weak| weak.strong_count() > 0);
            !weaks.is_empty()
        });
        interner.until_sweep = (interner.pages.len() * 2).max(1 << 16);
    }
    page
}
/// A file image: its length and the pages that hold non-hole bytes.
#[derive(Clone, Debug, Default)]
pub(crate) struct Content {
    len: u64,
    pages: BTreeMap<u64, Page>,
}

fn to_usize(value: u64) -> usize {
    usize::try_from(value).unwrap_or(usize::MAX)
}

impl Content {
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Copies bytes at `offset` into `buf` (zeros for holes), as many as the file has there.
    pub(crate) fn read(&self, offset: u64, buf: &mut [u8]) -> usize {
        let end = self.len.min(offset.saturating_add(buf.len() as u64));
        if offset >= end {
            return 0;
        }
        let count = to_usize(end - offset);
        let mut done = 0usize;
        while done < count {
            let at = offset + done as u64;
            let (page, within) = (at / PAGE_U64, to_usize(at % PAGE_U64));
            let take = (PAGE - within).min(count - done);
            match self.pages.get(&page) {
                Some(bytes) => {
                    buf[done..done + take].copy_from_slice(&bytes[within..within + take])
                }
                None => buf[done..done + take].fill(0),
            }
            done += take;
        }
        count
    }

    /// Writes `bytes` at `offset`, growing the file (with zeros) to cover them.
    pub(crate) fn write(&mut self, offset: u64, bytes: &[u8]) {
        let mut done = 0usize;
        while done < bytes.len() {
            let at = offset + done as u64;
            let (page, within) = (at / PAGE_U64, to_usize(at % PAGE_U64));
            let take = (PAGE - within).min(bytes.len() - done);
            if take == PAGE {
                // The whole page: share it with a live page of the same bytes, if any.
                self.pages.insert(page, intern(&bytes[done..done + PAGE]));
                done += take;
                continue;
            }
            let slot = self
                .pages
                .entry(page)
                .or_insert_with(|| Arc::new([0u8; PAGE]));
            Arc::make_mut(slot)[within..within + take].copy_from_slice(&bytes[done..done + take]);
            done += take;
        }
        self.len = self.len.max(offset + bytes.len() as u64);
    }

    /// Sets the length: bytes past a shrink are gone (a later growth reads zeros there), a growth
    /// is a hole.
    pub(crate) fn set_len(&mut self, len: u64) {
        if len < self.len {
            let first_gone = len.div_ceil(PAGE_U64);
            self.pages.retain(|page, _| *page < first_gone);
            let within = to_usize(len % PAGE_U64);
            if within > 0
                && let Some(last) = self.pages.get_mut(&(len / PAGE_U64))
            {
                Arc::make_mut(last)[within..].fill(0);
            }
        }
        self.len = len;
    }

    /// XORs `mask` into the byte at `offset`, if the file has one there.
    pub(crate) fn flip(&mut self, offset: u64, mask: u8) {
        if offset >= self.len {
            return;
        }
        let (page, within) = (offset / PAGE_U64, to_usize(offset % PAGE_U64));
        let slot = self
            .pages
            .entry(page)
            .or_insert_with(|| Arc::new([0u8; PAGE]));
        Arc::make_mut(slot)[within] ^= mask;
    }

    /// The whole file as bytes.
    #[cfg(test)]
    pub(crate) fn to_vec(&self) -> Vec<u8> {
        let mut bytes = vec![0u8; to_usize(self.len)];
        self.read(0, &mut bytes);
        bytes
    }

    /// Bytes held in pages (not the length): what this image costs, counting a page shared with
    /// another image once per image.
    pub(crate) fn pages(&self) -> impl Iterator<Item = &Page> {
        self.pages.values()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holes_read_as_zeros_and_writes_span_pages() {
        let mut content = Content::default();
        content.set_len(10 * PAGE_U64);
        assert_eq!(content.pages.len(), 0, "a hole costs nothing");
        let data: Vec<u8> = (0..PAGE + 100)
            .map(|i| u8::try_from(i % 251).unwrap_or(0) + 1)
            .collect();
        content.write(PAGE_U64 - 50, &data);
        let mut back = vec![0u8; data.len() + 100];
        assert_eq!(content.read(PAGE_U64 - 100, &mut back), back.len());
        assert!(back[..50].iter().all(|&b| b == 0));
        assert_eq!(&back[50..50 + data.len()], &data[..]);
        assert_eq!(content.len(), 10 * PAGE_U64);
        content.set_len(PAGE_U64 + 10);
        content.set_len(3 * PAGE_U64);
        let mut tail = [1u8; 20];
        content.read(PAGE_U64 + 5, &mut tail);
        assert!(
            tail[5..].iter().all(|&b| b == 0),
            "bytes past a shrink are gone"
        );
    }

    #[test]
    fn whole_pages_of_the_same_bytes_are_held_once_and_copied_on_write() {
        let bytes: Vec<u8> = (0..3 * PAGE)
            .map(|i| u8::try_from(i % 253).unwrap_or(0))
            .collect();
        let mut a = Content::default();
        let mut b = Content::default();
        a.write(0, &bytes);
        b.write(0, &bytes);
        for (x, y) in a.pages().zip(b.pages()) {
            assert!(
                Arc::ptr_eq(x, y),
                "the same bytes in another image share the page"
            );
        }
        // A partial write into a shared page copies it: the other image keeps its bytes.
        b.write(5, &[0xEE; 3]);
        assert_eq!(a.to_vec(), bytes);
        assert_eq!(&b.to_vec()[5..8], &[0xEE; 3]);
        // Different bytes never share.
        let mut c = Content::default();
        let other: Vec<u8> = bytes.iter().map(|b| b ^ 1).collect();
        c.write(0, &other);
        assert!(!Arc::ptr_eq(
            a.pages().next().unwrap(),
            c.pages().next().unwrap()
        ));
        assert_eq!(c.to_vec(), other);
    }

    #[test]
    fn clones_share_pages_until_written() {
        let mut a = Content::default();
        a.write(0, &[7u8; 100]);
        let mut b = a.clone();
        assert!(Arc::ptr_eq(
            a.pages().next().unwrap(),
            b.pages().next().unwrap()
        ));
        b.write(0, &[9u8; 1]);
        assert_eq!(a.to_vec()[0], 7);
        assert_eq!(b.to_vec()[0], 9);
    }
}
