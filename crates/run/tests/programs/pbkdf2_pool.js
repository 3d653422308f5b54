// Four pbkdf2 derivations on libuv's thread pool while the main thread waits in epoll_wait:
// the pool's workers must run although the main thread holds a kthread in the kernel.
'use strict';
const crypto = require('crypto');
const keys = new Array(4);
let done = 0;
for (let i = 0; i < keys.length; i++) {
  crypto.pbkdf2(`secret ${i}`, 'salt', 200000, 32, 'sha256', (err, key) => {
    if (err) throw err;
    keys[i] = key.toString('hex');
    if (++done === keys.length) {
      keys.forEach((k, j) => console.log(j, k));
    }
  });
}
