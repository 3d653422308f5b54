// An ExecutorService of 4 threads, a synchronized counter and CompletableFutures, with enough
// allocation for the garbage collector to run while they work. The output is the same every
// run, plain or under corral-run.
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.TimeUnit;

public class Pool {
    private static long counter = 0;

    private static synchronized void count() {
        counter++;
    }

    private static long work(int n) {
        long sum = 0;
        for (int i = 0; i < 200_000; i++) {
            List<Integer> garbage = new ArrayList<>();
            for (int k = 0; k < 8; k++) {
                garbage.add(i + k);
            }
            sum += garbage.get(n % 8);
            count();
        }
        return sum;
    }

    public static void main(String[] args) throws Exception {
        ExecutorService pool = Executors.newFixedThreadPool(4);
        List<CompletableFuture<Long>> futures = new ArrayList<>();
        for (int i = 0; i < 16; i++) {
            final int n = i;
            futures.add(CompletableFuture.supplyAsync(() -> work(n), pool));
        }
        long total = 0;
        for (CompletableFuture<Long> f : futures) {
            total += f.get();
        }
        CompletableFuture<String> chained = CompletableFuture
            .supplyAsync(() -> 21, pool)
            .thenApplyAsync(x -> x * 2, pool)
            .thenApply(x -> "chained " + x);
        System.out.println("total " + total);
        System.out.println("counter " + counter);
        System.out.println(chained.get());
        pool.shutdown();
        System.out.println("terminated " + pool.awaitTermination(30, TimeUnit.SECONDS));
    }
}
