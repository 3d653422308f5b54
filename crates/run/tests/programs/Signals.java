// Waits for signals the JVM handles itself: SIGQUIT prints a thread dump and the program goes
// on; SIGTERM runs the shutdown hook and ends the JVM (status 143).
public class Signals {
    public static void main(String[] args) throws Exception {
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            System.out.println("shutdown hook ran");
            System.out.flush();
        }));
        Thread worker = new Thread(() -> {
            long n = 0;
            while (true) {
                n++;
                if (n % 100_000_000 == 0) {
                    Thread.yield();
                }
            }
        });
        worker.setDaemon(true);
        worker.start();
        System.out.println("ready");
        System.out.flush();
        Thread.sleep(600_000);
    }
}
