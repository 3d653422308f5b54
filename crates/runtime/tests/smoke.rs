use corral::{Config, Runtime};

#[test]
fn spawn_and_join_small() {
    let rt = Runtime::new(Config::default().kthreads(2)).unwrap();
    let sum = rt.block_on(|| {
        let hs: Vec<_> = (0..1000u64).map(|i| corral::spawn(move || i * 2)).collect();
        hs.into_iter().map(|h| h.join().unwrap()).sum::<u64>()
    });
    assert_eq!(sum, 999 * 1000);
}
