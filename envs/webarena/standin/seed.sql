-- The stand-in shop's database (MariaDB): a few products, one customer (WebArena's shopping customer's
-- e-mail and password, so a task's require_login works as on the real site), no orders yet.
CREATE DATABASE IF NOT EXISTS shop;
CREATE USER IF NOT EXISTS 'shop'@'localhost' IDENTIFIED BY 'shop';
CREATE USER IF NOT EXISTS 'shop'@'127.0.0.1' IDENTIFIED BY 'shop';
GRANT ALL ON shop.* TO 'shop'@'localhost';
GRANT ALL ON shop.* TO 'shop'@'127.0.0.1';
USE shop;
CREATE TABLE products (id INT PRIMARY KEY, name VARCHAR(80) NOT NULL, price DECIMAL(8,2) NOT NULL);
CREATE TABLE customers (id INT PRIMARY KEY, email VARCHAR(120) NOT NULL UNIQUE, name VARCHAR(80) NOT NULL,
                        password_sha256 CHAR(64) NOT NULL);
CREATE TABLE orders (id INT AUTO_INCREMENT PRIMARY KEY, customer_id INT NOT NULL, product_id INT NOT NULL,
                     qty INT NOT NULL, FOREIGN KEY (customer_id) REFERENCES customers(id),
                     FOREIGN KEY (product_id) REFERENCES products(id));
INSERT INTO products VALUES (1, 'Espresso machine', 249.00), (2, 'Burr grinder', 89.50),
                            (3, 'Milk jug', 12.99), (4, 'Tamper', 19.90);
INSERT INTO customers VALUES (1, 'emma.lopez@hotmail.com', 'Emma Lopez', SHA2('Password.123', 256));
