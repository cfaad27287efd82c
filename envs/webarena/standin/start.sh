#!/bin/sh
# Entrypoint of the stand-in shopping image: MariaDB, then PHP-FPM, then nginx in the foreground. Each runs as
# its packaged user (mysql, www-data); the masters start as root, as in the image's own packaging. MariaDB's
# settings are in /etc/mysql/mariadb.conf.d/90-standin.cnf.
set -e
install -d -o mysql -g mysql /run/mysqld
mariadbd --user=mysql --datadir=/var/lib/mysql --socket=/run/mysqld/mysqld.sock --port=3306 \
  >> /var/log/mariadbd.log 2>&1 &
i=0
until mariadb-admin --socket=/run/mysqld/mysqld.sock ping > /dev/null 2>&1; do
  i=$((i + 1)); [ "$i" -gt 600 ] && { echo "MariaDB did not start:"; tail -20 /var/log/mariadbd.log; exit 1; }
  sleep 0.1
done
if [ ! -f /var/lib/mysql/.standin-seeded ]; then
  mariadb --socket=/run/mysqld/mysqld.sock < /opt/standin/seed.sql
  touch /var/lib/mysql/.standin-seeded
fi
install -d /run/php
"$(ls /usr/sbin/php-fpm* | head -n 1)" --daemonize --fpm-config "$(ls /etc/php/*/fpm/php-fpm.conf | head -n 1)"
exec nginx -g 'daemon off;'
